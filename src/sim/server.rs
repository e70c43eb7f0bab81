//! The simulated model server: a real HTTP/1 server on 127.0.0.1.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Notify, Semaphore};
use tokio::time::Instant;

use super::control;
use super::fault::Fault;
use super::loads::Loads;
use super::metrics::{self, Snapshot};
use super::openai;
use super::protocol::{self, BACKEND_HEADER, COLD_LOAD_HEADER, RESIDENT_MODELS_HEADER};
use super::queue::{backlog_delay, Counted};
use super::repository;
use super::residency::{Access, Residency};
use super::stats::{Counters, ServerStats};
use super::wire::{CutMidBody, Wire};
use super::ServerConfig;
use crate::route::{ModelId, RequestKind, RouteInfo};

#[derive(Debug)]
pub(super) struct State {
    pub(super) name: String,
    pub(super) config: ServerConfig,
    pub(super) slots: Semaphore,
    pub(super) residency: Mutex<Residency>,
    pub(super) fault: watch::Sender<Option<Fault>>,
    pub(super) counters: Counters,
    gpu_uuid: String,
    /// Loads through the repository API in progress, and load calls.
    pub(super) loads: Mutex<Loads>,
    /// Woken when a request is answered, starts or stops hanging, and when
    /// a load call arrives, a load starts or a load ends.
    pub(super) changed: Notify,
    /// Turns `true` when the server stops.
    pub(super) shutdown: watch::Receiver<bool>,
}

/// A running simulated model server; stops when dropped (or, waiting until
/// its port is free, with [`stop`](Self::stop)).
///
/// ```
/// use tower_model_balance::sim::{ModelServer, ServerConfig};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let server = ModelServer::start("node-0", ServerConfig::default()).await.unwrap();
/// assert!(server.addr().ip().is_loopback());
/// assert_eq!(server.stats().requests, 0);
///
/// // Killed, then started again on the same port: a fresh process.
/// let (addr, config) = (server.addr(), server.config().clone());
/// server.stop().await;
/// let server = ModelServer::start_on("node-0", config, addr).await.unwrap();
/// assert_eq!(server.addr(), addr);
/// # }
/// ```
#[derive(Debug)]
pub struct ModelServer {
    addr: SocketAddr,
    state: Arc<State>,
    shutdown: watch::Sender<bool>,
    /// Closed once the accept task and every connection task have ended
    /// (each holds a sender).
    tasks: mpsc::Receiver<()>,
}

impl ModelServer {
    /// Binds 127.0.0.1 on a free port and serves until dropped.
    ///
    /// # Errors
    ///
    /// The I/O error when the socket cannot be bound.
    pub async fn start(name: &str, config: ServerConfig) -> std::io::Result<Self> {
        Self::start_on(name, config, (std::net::Ipv4Addr::LOCALHOST, 0).into()).await
    }

    /// Binds `addr` and serves until dropped: with port 0 a free port, as
    /// [`start`](Self::start) does; with the address of a server
    /// [stopped](Self::stop), the same port again — a restart. A restarted
    /// server is a fresh process: no model resident, no fault, its
    /// counters from zero.
    ///
    /// # Errors
    ///
    /// The I/O error when the socket cannot be bound (e.g. the port is in
    /// use).
    pub async fn start_on(
        name: &str,
        config: ServerConfig,
        addr: SocketAddr,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (shutdown, watch) = watch::channel(false);
        let state = Arc::new(State {
            name: name.to_owned(),
            slots: Semaphore::new(config.concurrency),
            residency: Mutex::new(Residency::new(config.resident_slots)),
            fault: watch::Sender::new(None),
            counters: Counters::default(),
            gpu_uuid: metrics::gpu_uuid(name),
            config,
            loads: Mutex::new(Loads::default()),
            changed: Notify::new(),
            shutdown: watch.clone(),
        });
        let (alive, tasks) = mpsc::channel(1);
        tokio::spawn(accept(listener, state.clone(), watch, alive));
        Ok(Self {
            addr,
            state,
            shutdown,
            tasks,
        })
    }

    /// Kills the server: stops accepting, and cuts every connection — the
    /// requests in flight are dropped unanswered, their clients see the
    /// connection closed. Returns once the listening socket and every
    /// connection are closed, so that [`start_on`](Self::start_on) can
    /// bind the same address at once; clients connecting meanwhile are
    /// refused.
    pub async fn stop(mut self) {
        let _ = self.shutdown.send(true);
        // Every task holds a sender: `None` once all have ended.
        while self.tasks.recv().await.is_some() {}
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
        self.state.fault.send_replace(fault);
    }

    /// Counters so far, and the requests waiting and running now.
    pub fn stats(&self) -> ServerStats {
        let c = &self.state.counters;
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ServerStats {
            requests: read(&c.requests),
            work: read(&c.work),
            cold_loads: read(&c.cold_loads),
            unavailable: read(&c.unavailable),
            waiting: read(&c.waiting),
            running: read(&c.running),
            not_found: read(&c.not_found),
            load_calls: read(&c.load_calls),
            loads_started: read(&c.loads_started),
            loads_failed: read(&c.loads_failed),
            max_concurrent_loads_per_model: lock(&self.state.loads).max_calls(),
            unloads: read(&c.unloads),
            hung: read(&c.hung),
            evictions: lock(&self.state.residency).evictions(),
        }
    }

    /// Waits until `done` holds for the server's [`stats`](Self::stats)
    /// and returns them: an event hook for tests (no sleeping). The stats
    /// are checked at once, then each time a request is answered, starts
    /// or stops hanging ([`Fault::Hang`]), and each
    /// time a load call arrives, a load starts or a load ends — so a
    /// condition on the gauges `waiting` and `running` alone may be seen
    /// late. Bound it with a timeout: it waits as long as `done` is false.
    pub async fn wait_for_stats(&self, done: impl Fn(&ServerStats) -> bool) -> ServerStats {
        loop {
            let changed = self.state.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let stats = self.stats();
            if done(&stats) {
                return stats;
            }
            changed.await;
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

pub(super) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Accepts connections until the server stops; `alive` is held by this
/// task and by every connection task.
async fn accept(
    listener: TcpListener,
    state: Arc<State>,
    mut shutdown: watch::Receiver<bool>,
    alive: mpsc::Sender<()>,
) {
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
        let alive = alive.clone();
        tokio::spawn(async move {
            let _alive = alive;
            let service = service_fn(move |req| {
                let state = state.clone();
                async move {
                    let response = handle(state.clone(), req).await;
                    state.changed.notify_waiters();
                    response.map(Wire::of)
                }
            });
            let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                _ = conn => {}
                _ = shutdown.changed() => {}
            }
        });
    }
}

/// An answer as the handlers build it; [`Wire::of`] turns it into what is
/// sent.
pub(super) type SimResponse = Response<Bytes>;

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Result<SimResponse, Infallible> {
    let seq = state.counters.requests.fetch_add(1, Ordering::Relaxed);
    let fault = *state.fault.borrow();
    if fault == Some(Fault::Hang) {
        return hang(&state, req).await;
    }
    if req.method() == Method::GET && req.uri().path() == protocol::READY_PATH {
        let status = if fault == Some(Fault::Unavailable) {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::OK
        };
        return Ok(plain(status, ""));
    }
    if let Some(route) = control::Route::of(req.method(), req.uri().path()) {
        let body = req.into_body().collect().await.map(|b| b.to_bytes());
        return Ok(control::serve(&state, route, body.ok()).await);
    }
    if req.method() == Method::POST && req.uri().path() == protocol::REPOSITORY_INDEX_PATH {
        let body = req.into_body().collect().await.map(|b| b.to_bytes());
        if fault == Some(Fault::Unavailable) {
            return Ok(unavailable(&state));
        }
        let ready_only = body.is_ok_and(|b| control::asks_ready_only(&b));
        let index = repository::index_body(
            &lock(&state.residency),
            Instant::now(),
            state.config.repository(),
            ready_only,
        );
        return Ok(json(StatusCode::OK, &index));
    }
    if let Some(response) = info(&state, fault, req.method(), req.uri().path()) {
        // Read a POST's body whole, so the connection stays usable.
        let _ = req.into_body().collect().await;
        return Ok(response);
    }
    // The KServe v2 route names the model in its path, the OpenAI ones in
    // the body (read below).
    let (path_model, openai) = match (req.method(), req.uri().path()) {
        (&Method::POST, path) => {
            match (protocol::parse_infer_path(path), openai::Route::of(path)) {
                (Some(name), _) => match ModelId::new(&name) {
                    Ok(model) => (Some(model), None),
                    Err(error) => return Ok(plain(StatusCode::BAD_REQUEST, &error.to_string())),
                },
                (None, Some(route)) => (None, Some(route)),
                (None, None) => return Ok(plain(StatusCode::NOT_FOUND, "not found")),
            }
        }
        _ => return Ok(plain(StatusCode::NOT_FOUND, "not found")),
    };
    state.counters.work.fetch_add(1, Ordering::Relaxed);
    let kind = match RouteInfo::from_headers(req.headers()) {
        Ok(route) => route.kind,
        Err(_) => RequestKind::Inference,
    };
    let Ok(body) = req.into_body().collect().await else {
        return Ok(plain(StatusCode::BAD_REQUEST, "unreadable body"));
    };
    let (slow, backlog) = match fault {
        Some(Fault::Unavailable) => return Ok(unavailable(&state)),
        Some(Fault::Slow { factor, share }) => {
            let draw = xxhash_rust::xxh3::xxh3_64(&seq.to_le_bytes()) as f64 / u64::MAX as f64;
            (if draw < share { factor.max(1) } else { 1 }, 0)
        }
        Some(Fault::Backlog { waiting }) => (1, waiting),
        _ => (1, 0),
    };
    let model = match path_model {
        Some(model) => model,
        None => match openai::model(&body.to_bytes()) {
            Ok(model) => model,
            Err(bad) => return Ok(bad.response()),
        },
    };
    if kind != RequestKind::Update {
        if let Some(error) = control::not_found(&state, model.as_str()) {
            state.counters.not_found.fetch_add(1, Ordering::Relaxed);
            return Ok(match openai {
                Some(_) => openai::not_found(model.as_str()),
                None => json(StatusCode::NOT_FOUND, &error),
            });
        }
    }
    let config = &state.config;
    let service = match kind {
        RequestKind::Update => config.update_time,
        _ => config.inference.of(model.as_str()),
    }
    .saturating_mul(slow);
    // A request that arrives while its model loads here waits for that
    // load, whether it waits in the serving queue or in a slot: cold, like
    // the one that started the load.
    let arrived_loading = kind != RequestKind::Update
        && !config.explicit_load
        && lock(&state.residency).lookup(model.as_str(), Instant::now(), false) == Some(false);
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
    let cold = if kind == RequestKind::Update || config.explicit_load {
        // Explicit mode: the model was loaded when the request arrived, and
        // an admitted request keeps it (as Triton's requests hold theirs).
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
        cold || arrived_loading
    };
    let resident = repository::resident_list(&lock(&state.residency), Instant::now());
    let mut response = match openai {
        Some(route) => json(StatusCode::OK, &route.response(model.as_str())),
        None => plain(StatusCode::OK, &protocol::infer_response(model.as_str())),
    };
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
    if fault == Some(Fault::Reset) {
        response.extensions_mut().insert(CutMidBody);
    }
    Ok(response)
}

/// Reads `req` whole and never answers it ([`Fault::Hang`]): pending,
/// counted as hung, until dropped with its connection.
async fn hang(state: &State, req: Request<Incoming>) -> Result<SimResponse, Infallible> {
    let _hung = Hung::enter(state);
    let _ = req.into_body().collect().await;
    std::future::pending().await
}

/// Counts a request in [`ServerStats::hung`] while it lives, waking
/// [`ModelServer::wait_for_stats`] when it starts and stops hanging.
struct Hung<'a>(&'a State);

impl<'a> Hung<'a> {
    fn enter(state: &'a State) -> Self {
        state.counters.hung.fetch_add(1, Ordering::Relaxed);
        state.changed.notify_waiters();
        Self(state)
    }
}

impl Drop for Hung<'_> {
    fn drop(&mut self) {
        self.0.counters.hung.fetch_sub(1, Ordering::Relaxed);
        self.0.changed.notify_waiters();
    }
}

/// The answer to a request for the model list or the metrics; `None` for
/// any other request.
fn info(state: &State, fault: Option<Fault>, method: &Method, path: &str) -> Option<SimResponse> {
    let known = matches!(
        (method, path),
        (&Method::GET, protocol::MODELS_PATH) | (&Method::GET, protocol::METRICS_PATH)
    );
    if !known {
        return None;
    }
    if fault == Some(Fault::Unavailable) {
        return Some(unavailable(state));
    }
    let now = Instant::now();
    let (body, content_type) = match path {
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
pub(super) fn unavailable(state: &State) -> SimResponse {
    state.counters.unavailable.fetch_add(1, Ordering::Relaxed);
    plain(StatusCode::SERVICE_UNAVAILABLE, "unavailable")
}

/// A response with a JSON body.
pub(super) fn json(status: StatusCode, body: &str) -> SimResponse {
    let mut response = plain(status, body);
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// A response with a text body (no content type).
pub(super) fn plain(status: StatusCode, body: &str) -> SimResponse {
    let mut response = Response::new(Bytes::copy_from_slice(body.as_bytes()));
    *response.status_mut() = status;
    response
}
