//! A simulated KServe v2 gRPC model server on loopback: tonic's HTTP/2
//! server, one hand-written service (no codegen) answering `ModelInfer`,
//! `ServerLive` and `ModelReady` with prost's codec.
//!
//! It keeps a few models resident (least recently used evicted); a model
//! not resident is loaded first, which takes `cold_load` — the cost model
//! affinity exists to avoid. A fault makes it answer every call with a
//! gRPC status (`UNAVAILABLE`, say) in a trailers-only response, as a
//! sick server does. Each answer's initial metadata says who served it
//! and whether it was a cold load, under the crate simulator's header
//! names (`x-sim-backend`, `x-sim-cold-load`, `x-sim-resident-models`).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderMap, HeaderValue};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tonic::body::Body;
use tonic::metadata::MetadataMap;
use tonic::server::NamedService;
use tonic::transport::server::TcpIncoming;
use tonic::{Code, Status};
use tonic_prost::ProstCodec;
use tower::service_fn;
use tower_model_balance::backend::BackendId;
use tower_model_balance::error::BoxError;
use tower_model_balance_sim::protocol::{BACKEND_HEADER, COLD_LOAD_HEADER, RESIDENT_MODELS_HEADER};

use crate::kserve::{
    InferOutputTensor, InferTensorContents, ModelInferRequest, ModelInferResponse,
    ModelReadyRequest, ModelReadyResponse, ServerLiveRequest, ServerLiveResponse, MODEL_INFER_PATH,
    MODEL_READY_PATH, SERVER_LIVE_PATH, SERVICE,
};

/// How a simulated server behaves.
#[derive(Debug, Clone, Copy)]
pub struct ServerConfig {
    /// Models kept resident at once.
    pub slots: usize,
    /// How long loading a model that is not resident takes.
    pub cold_load: Duration,
}

impl Default for ServerConfig {
    /// 3 resident models, 40 ms to load one.
    fn default() -> Self {
        Self {
            slots: 3,
            cold_load: Duration::from_millis(40),
        }
    }
}

/// What a server did, counted as it answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// `ModelInfer` calls answered with outputs.
    pub served: u64,
    /// … of which loaded their model first.
    pub cold_loads: u64,
    /// `ModelInfer` calls answered with an error status (a fault, a bad
    /// request).
    pub failed: u64,
}

/// A running server; it stops when dropped.
#[derive(Debug)]
pub struct GrpcModelServer {
    name: String,
    addr: SocketAddr,
    state: Arc<State>,
    _stop: oneshot::Sender<()>,
}

impl GrpcModelServer {
    /// Starts a server named `name` on 127.0.0.1, on a port the system
    /// picks.
    ///
    /// # Errors
    ///
    /// The listener could not be bound.
    pub async fn start(name: &str, config: ServerConfig) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State::new(name, config));
        let service = InferenceService {
            state: state.clone(),
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let serve = tonic::transport::Server::builder().serve_with_incoming_shutdown(
            service,
            TcpIncoming::from(listener),
            async {
                let _ = stopped.await;
            },
        );
        tokio::spawn(async move {
            if let Err(error) = serve.await {
                eprintln!("simulated server stopped: {error}");
            }
        });
        Ok(Self {
            name: name.to_owned(),
            addr,
            state,
            _stop: stop,
        })
    }

    /// Its name (the backend ID the example gives it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The backend a client dials for it: its name as the ID, and
    /// `http://{addr}`.
    ///
    /// # Errors
    ///
    /// Its name is no valid backend ID.
    pub fn backend(&self) -> Result<(BackendId, String), BoxError> {
        Ok((BackendId::new(&self.name)?, format!("http://{}", self.addr)))
    }

    /// Its counters now.
    pub fn stats(&self) -> ServerStats {
        let read = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ServerStats {
            served: read(&self.state.served),
            cold_loads: read(&self.state.cold_loads),
            failed: read(&self.state.failed),
        }
    }

    /// Answers every `ModelInfer` with `fault`'s status from now on
    /// (`None`: serves again).
    pub fn set_fault(&self, fault: Option<Code>) {
        *lock(&self.state.fault) = fault;
    }

    /// Holds every `ModelInfer` call from now on, unanswered, until
    /// [`release`](Self::release): a stalled server (a long queue, a
    /// pause). A held call the client gives up on (a hedge's loser) is
    /// dropped unanswered.
    pub fn hold(&self) {
        self.state.hold.send_replace(true);
    }

    /// Answers the calls held, and serves again.
    pub fn release(&self) {
        self.state.hold.send_replace(false);
    }

    /// `ModelInfer` calls held so far.
    pub fn held_calls(&self) -> u64 {
        self.state.held.load(Ordering::Relaxed)
    }
}

/// What the service shares.
#[derive(Debug)]
struct State {
    name: String,
    config: ServerConfig,
    /// Resident models, most recently used first, each with the time its
    /// load ends (a request arriving before then waits for it: cold).
    resident: Mutex<VecDeque<(String, Instant)>>,
    fault: Mutex<Option<Code>>,
    /// Whether calls are held (see `GrpcModelServer::hold`).
    hold: watch::Sender<bool>,
    held: AtomicU64,
    served: AtomicU64,
    cold_loads: AtomicU64,
    failed: AtomicU64,
}

impl State {
    fn new(name: &str, config: ServerConfig) -> Self {
        Self {
            name: name.to_owned(),
            config,
            resident: Mutex::new(VecDeque::new()),
            fault: Mutex::new(None),
            hold: watch::Sender::new(false),
            held: AtomicU64::new(0),
            served: AtomicU64::new(0),
            cold_loads: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }

    /// Makes `model` resident (most recently used, evicting the least
    /// recently used past `slots`): when its load ends, and whether this
    /// request waits for it (cold), with the resident list after.
    fn touch(&self, model: &str, now: Instant) -> (Instant, bool, String) {
        let mut resident = lock(&self.resident);
        let (ready_at, cold) = match resident.iter().position(|(m, _)| m == model) {
            Some(i) => {
                let entry = resident
                    .remove(i)
                    .unwrap_or_else(|| (model.to_owned(), now));
                let ready_at = entry.1;
                resident.push_front(entry);
                (ready_at, ready_at > now)
            }
            None => {
                let ready_at = now + self.config.cold_load;
                resident.push_front((model.to_owned(), ready_at));
                resident.truncate(self.config.slots.max(1));
                (ready_at, true)
            }
        };
        let mut names: Vec<&str> = resident.iter().map(|(m, _)| m.as_str()).collect();
        names.sort_unstable();
        (ready_at, cold, names.join(","))
    }

    async fn model_infer(
        &self,
        req: ModelInferRequest,
    ) -> Result<tonic::Response<ModelInferResponse>, Status> {
        let fault = *lock(&self.fault);
        if let Some(code) = fault {
            self.failed.fetch_add(1, Ordering::Relaxed);
            return Err(Status::new(code, format!("{} is failing", self.name)));
        }
        if req.model_name.is_empty() {
            self.failed.fetch_add(1, Ordering::Relaxed);
            return Err(Status::invalid_argument("model_name is empty"));
        }
        let mut hold = self.hold.subscribe();
        if *hold.borrow_and_update() {
            self.held.fetch_add(1, Ordering::Relaxed);
            // Until released (the sender lives as long as `self`).
            let _ = hold.wait_for(|held| !held).await;
        }
        let (ready_at, cold, resident) = self.touch(&req.model_name, Instant::now());
        if cold {
            self.cold_loads.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep_until(ready_at).await;
        }
        self.served.fetch_add(1, Ordering::Relaxed);
        let mut headers = HeaderMap::new();
        let text = |s: &str| HeaderValue::from_str(s).unwrap_or(HeaderValue::from_static("?"));
        headers.insert(BACKEND_HEADER, text(&self.name));
        headers.insert(
            COLD_LOAD_HEADER,
            HeaderValue::from_static(if cold { "true" } else { "false" }),
        );
        headers.insert(RESIDENT_MODELS_HEADER, text(&resident));
        let answer = ModelInferResponse {
            model_name: req.model_name,
            model_version: "1".to_owned(),
            id: req.id,
            outputs: req.inputs.iter().map(run).collect(),
            ..Default::default()
        };
        Ok(tonic::Response::from_parts(
            MetadataMap::from_headers(headers),
            answer,
            tonic::Extensions::default(),
        ))
    }

    fn model_ready(&self, req: &ModelReadyRequest) -> ModelReadyResponse {
        let now = Instant::now();
        let ready = lock(&self.resident)
            .iter()
            .any(|(m, ready_at)| *m == req.name && *ready_at <= now);
        ModelReadyResponse { ready }
    }
}

/// The simulated model: each output is its input with numbers doubled
/// (`output0` for `input0`); contents of other types come back as sent.
fn run(input: &crate::kserve::InferInputTensor) -> InferOutputTensor {
    let contents = input.contents.clone().map(|c| InferTensorContents {
        fp32_contents: c.fp32_contents.iter().map(|x| x * 2.0).collect(),
        fp64_contents: c.fp64_contents.iter().map(|x| x * 2.0).collect(),
        int64_contents: c
            .int64_contents
            .iter()
            .map(|x| x.saturating_mul(2))
            .collect(),
        ..c
    });
    InferOutputTensor {
        name: input.name.replacen("input", "output", 1),
        datatype: input.datatype.clone(),
        shape: input.shape.clone(),
        contents,
        ..Default::default()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The service tonic's server runs: routes by path, as generated code
/// would.
#[derive(Debug, Clone)]
struct InferenceService {
    state: Arc<State>,
}

impl NamedService for InferenceService {
    const NAME: &'static str = SERVICE;
}

type BoxFuture = Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send>>;

impl tower::Service<http::Request<Body>> for InferenceService {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> BoxFuture {
        let state = self.state.clone();
        match req.uri().path() {
            MODEL_INFER_PATH => Box::pin(async move {
                let method = service_fn(move |req: tonic::Request<ModelInferRequest>| {
                    let state = state.clone();
                    async move { state.model_infer(req.into_inner()).await }
                });
                let codec = ProstCodec::<ModelInferResponse, ModelInferRequest>::default();
                Ok(tonic::server::Grpc::new(codec).unary(method, req).await)
            }),
            SERVER_LIVE_PATH => Box::pin(async move {
                let method = service_fn(|_: tonic::Request<ServerLiveRequest>| async {
                    Ok::<_, Status>(tonic::Response::new(ServerLiveResponse { live: true }))
                });
                let codec = ProstCodec::<ServerLiveResponse, ServerLiveRequest>::default();
                Ok(tonic::server::Grpc::new(codec).unary(method, req).await)
            }),
            MODEL_READY_PATH => Box::pin(async move {
                let method = service_fn(move |req: tonic::Request<ModelReadyRequest>| {
                    let ready = state.model_ready(req.get_ref());
                    async move { Ok::<_, Status>(tonic::Response::new(ready)) }
                });
                let codec = ProstCodec::<ModelReadyResponse, ModelReadyRequest>::default();
                Ok(tonic::server::Grpc::new(codec).unary(method, req).await)
            }),
            path => {
                let status = Status::unimplemented(format!("no method {path}"));
                Box::pin(async move { Ok(status.into_http()) })
            }
        }
    }
}
