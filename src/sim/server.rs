//! The simulated model server: a real HTTP/1 server on 127.0.0.1.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::time::Instant;

use super::fault::Fault;
use super::metrics::{self, Snapshot};
use super::protocol::{self, BACKEND_HEADER, COLD_LOAD_HEADER, RESIDENT_MODELS_HEADER};
use super::queue::{backlog_delay, Counted};
use super::repository;
use super::residency::{Access, Residency};
use super::ServerConfig;
use crate::route::{ModelId, RequestKind, RouteInfo};

/// Counters of one simulated server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ServerStats {
    /// Requests received (every path).
    pub requests: u64,
    /// Inference and update requests received.
    pub work: u64,
    /// Model loads started.
    pub cold_loads: u64,
    /// Requests answered 503 because of a fault (readiness checks apart).
    pub unavailable: u64,
    /// Inference and update requests waiting now: behind a
    /// [`Fault::Backlog`] or for a serving slot (the phantom requests of
    /// the backlog not counted).
    pub waiting: u64,
    /// Inference and update requests holding a serving slot now.
    pub running: u64,
}

#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    work: AtomicU64,
    cold_loads: AtomicU64,
    unavailable: AtomicU64,
    waiting: AtomicU64,
    running: AtomicU64,
}

#[derive(Debug)]
struct State {
    name: String,
    config: ServerConfig,
    slots: Semaphore,
    residency: Mutex<Residency>,
    fault: Mutex<Option<Fault>>,
    counters: Counters,
    gpu_uuid: String,
}

/// A running simulated model server; stops when dropped.
///
/// ```
/// use tower_model_balance::sim::{ModelServer, ServerConfig};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let server = ModelServer::start("node-0", ServerConfig::default()).await.unwrap();
/// assert!(server.addr().ip().is_loopback());
/// assert_eq!(server.stats().requests, 0);
/// # }
/// ```
#[derive(Debug)]
pub struct ModelServer {
    addr: SocketAddr,
    state: Arc<State>,
    shutdown: watch::Sender<bool>,
}

impl ModelServer {
    /// Binds 127.0.0.1 on a free port and serves until dropped.
    ///
    /// # Errors
    ///
    /// The I/O error when the socket cannot be bound.
    pub async fn start(name: &str, config: ServerConfig) -> std::io::Result<Self> {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            name: name.to_owned(),
            slots: Semaphore::new(config.concurrency),
            residency: Mutex::new(Residency::new(config.resident_slots)),
            fault: Mutex::new(None),
            counters: Counters::default(),
            gpu_uuid: metrics::gpu_uuid(name),
            config,
        });
        let (shutdown, watch) = watch::channel(false);
        tokio::spawn(accept(listener, state.clone(), watch));
        Ok(Self {
            addr,
            state,
            shutdown,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The server's name, as sent in [`BACKEND_HEADER`].
    pub fn name(&self) -> &str {
        &self.state.name
    }

    /// Puts the server in `fault`, or back to normal with `None`.
    pub fn set_fault(&self, fault: Option<Fault>) {
        *lock(&self.state.fault) = fault;
    }

    /// Counters so far, and the requests waiting and running now.
    pub fn stats(&self) -> ServerStats {
        let c = &self.state.counters;
        ServerStats {
            requests: c.requests.load(Ordering::Relaxed),
            work: c.work.load(Ordering::Relaxed),
            cold_loads: c.cold_loads.load(Ordering::Relaxed),
            unavailable: c.unavailable.load(Ordering::Relaxed),
            waiting: c.waiting.load(Ordering::Relaxed),
            running: c.running.load(Ordering::Relaxed),
        }
    }

    /// The config it serves by.
    pub fn config(&self) -> &ServerConfig {
        &self.state.config
    }

    /// Models resident now (loaded or loading).
    pub fn resident_models(&self) -> Vec<String> {
        lock(&self.state.residency)
            .models()
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

async fn accept(listener: TcpListener, state: Arc<State>, mut shutdown: watch::Receiver<bool>) {
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    tracing::debug!(%error, "sim accept failed");
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let mut shutdown = shutdown.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| handle(state.clone(), req));
            let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                _ = shutdown.changed() => {}
            }
        });
    }
}

type SimResponse = Response<Full<Bytes>>;

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Result<SimResponse, Infallible> {
    let seq = state.counters.requests.fetch_add(1, Ordering::Relaxed);
    let fault = *lock(&state.fault);
    if req.method() == Method::GET && req.uri().path() == protocol::READY_PATH {
        let status = if fault == Some(Fault::Unavailable) {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::OK
        };
        return Ok(plain(status, ""));
    }
    if let Some(response) = info(&state, fault, req.method(), req.uri().path()) {
        // Read a POST's body whole, so the connection stays usable.
        let _ = req.into_body().collect().await;
        return Ok(response);
    }
    let model = match (req.method(), protocol::parse_infer_path(req.uri().path())) {
        (&Method::POST, Some(name)) => match ModelId::new(name) {
            Ok(model) => model,
            Err(error) => return Ok(plain(StatusCode::BAD_REQUEST, &error.to_string())),
        },
        _ => return Ok(plain(StatusCode::NOT_FOUND, "not found")),
    };
    state.counters.work.fetch_add(1, Ordering::Relaxed);
    let kind = match RouteInfo::from_headers(req.headers()) {
        Ok(route) => route.kind,
        Err(_) => RequestKind::Inference,
    };
    if req.into_body().collect().await.is_err() {
        return Ok(plain(StatusCode::BAD_REQUEST, "unreadable body"));
    }
    let (slow, backlog) = match fault {
        Some(Fault::Unavailable) => return Ok(unavailable(&state)),
        Some(Fault::Slow { factor, share }) => {
            let draw = xxhash_rust::xxh3::xxh3_64(&seq.to_le_bytes()) as f64 / u64::MAX as f64;
            (if draw < share { factor.max(1) } else { 1 }, 0)
        }
        Some(Fault::Backlog { waiting }) => (1, waiting),
        None => (1, 0),
    };
    let config = &state.config;
    let service = match kind {
        RequestKind::Update => config.update_time,
        _ => config.inference.of(model.as_str()),
    }
    .saturating_mul(slow);
    let waiting = Counted::enter(&state.counters.waiting);
    if backlog > 0 {
        // Only then: a zero sleep would still wait for the timer's next tick.
        tokio::time::sleep(backlog_delay(backlog, config.concurrency, service)).await;
    }
    let Ok(_slot) = state.slots.acquire().await else {
        return Ok(plain(StatusCode::SERVICE_UNAVAILABLE, "closed"));
    };
    drop(waiting);
    let _running = Counted::enter(&state.counters.running);
    let cold = if kind == RequestKind::Update {
        tokio::time::sleep(service).await;
        false
    } else {
        let access =
            lock(&state.residency).access(model.as_str(), Instant::now(), config.cold_load);
        let cold = match access {
            Access::Warm => false,
            Access::Load { ready_at } => {
                state.counters.cold_loads.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep_until(ready_at).await;
                true
            }
            Access::Loading { ready_at } => {
                tokio::time::sleep_until(ready_at).await;
                true
            }
        };
        tokio::time::sleep(service).await;
        cold
    };
    let resident = repository::resident_list(&lock(&state.residency), Instant::now());
    let mut response = plain(StatusCode::OK, &protocol::infer_response(model.as_str()));
    let headers = response.headers_mut();
    headers.insert(
        COLD_LOAD_HEADER,
        http::HeaderValue::from_static(if cold { "true" } else { "false" }),
    );
    if let Ok(name) = http::HeaderValue::from_str(&state.name) {
        headers.insert(BACKEND_HEADER, name);
    }
    // Model IDs hold no control characters: valid header bytes.
    if let Ok(models) = http::HeaderValue::from_bytes(resident.as_bytes()) {
        headers.insert(RESIDENT_MODELS_HEADER, models);
    }
    Ok(response)
}

/// The answer to a request for the repository index, the model list or
/// the metrics; `None` for any other request.
fn info(state: &State, fault: Option<Fault>, method: &Method, path: &str) -> Option<SimResponse> {
    let known = matches!(
        (method, path),
        (&Method::POST, protocol::REPOSITORY_INDEX_PATH)
            | (&Method::GET, protocol::MODELS_PATH)
            | (&Method::GET, protocol::METRICS_PATH)
    );
    if !known {
        return None;
    }
    if fault == Some(Fault::Unavailable) {
        return Some(unavailable(state));
    }
    let now = Instant::now();
    let (body, content_type) = match path {
        protocol::REPOSITORY_INDEX_PATH => (
            repository::index_body(&lock(&state.residency), now),
            "application/json",
        ),
        protocol::MODELS_PATH => (
            repository::models_body(&lock(&state.residency), now),
            "application/json",
        ),
        _ => (
            metrics::render(&snapshot(state, fault), &state.gpu_uuid),
            "text/plain; version=0.0.4",
        ),
    };
    let mut response = plain(StatusCode::OK, &body);
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    Some(response)
}

/// What the metrics show now.
fn snapshot(state: &State, fault: Option<Fault>) -> Snapshot {
    let phantom = match fault {
        Some(Fault::Backlog { waiting }) => u64::from(waiting),
        _ => 0,
    };
    let c = &state.counters;
    Snapshot {
        running: c.running.load(Ordering::Relaxed),
        waiting: c.waiting.load(Ordering::Relaxed) + phantom,
        concurrency: state.config.concurrency as u64,
        resident: lock(&state.residency).models().count() as u64,
        slots: state.config.resident_slots as u64,
        model_memory: state.config.model_memory,
    }
}

/// A 503 for a fault, counted.
fn unavailable(state: &State) -> SimResponse {
    state.counters.unavailable.fetch_add(1, Ordering::Relaxed);
    plain(StatusCode::SERVICE_UNAVAILABLE, "unavailable")
}

fn plain(status: StatusCode, body: &str) -> SimResponse {
    let mut response = Response::new(Full::new(Bytes::copy_from_slice(body.as_bytes())));
    *response.status_mut() = status;
    response
}
