//! The chaos suite's stack and load: eight simulated model servers behind
//! the whole stack — retry and hedge, the balancer with its breakers,
//! health and probes, a timeout below each breaker, a hyper-util client —
//! and 64 workers sending requests through it, each request tallied by how
//! it resolved.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use tokio::sync::watch;
use tower::discover::ServiceList;
use tower::retry::RetryLayer;
use tower::timeout::error::Elapsed;
use tower::timeout::Timeout;
use tower::util::rng::Rng;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};
use tower_model_balance::backend::{Backend, BackendId, BackendMeta};
use tower_model_balance::balance::{BalanceConfig, BalancerHandle, ModelBalancer, ResidencyHeader};
use tower_model_balance::breaker::{BreakerConfig, BreakerState, Transition};
use tower_model_balance::endpoint::{Origin, SetOrigin};
use tower_model_balance::error::{BreakerOpen, NoHealthyBackend};
use tower_model_balance::health::probe::{
    KServeV2, MetricNames, ProbeClient, ProbeConfig, PrometheusMetrics,
};
use tower_model_balance::health::HealthConfig;
use tower_model_balance::hedge::{BalancerLoad, HedgeConfig, HedgeHandle, HedgeLayer};
use tower_model_balance::route::ModelId;
use tower_model_balance::task::BackgroundTask;
use tower_model_balance_sim::{protocol, ModelServer};

use crate::chaos_log::{Counted, Log, Marked};
use crate::lcg::Lcg;

/// Requests each simulated server serves at once.
pub const SERVER_CONCURRENCY: usize = 16;
/// The timeout below each backend's breaker.
pub const TIMEOUT: Duration = Duration::from_secs(1);
/// Rounds of active probes, this far apart.
pub const PROBE_ROUND: Duration = Duration::from_millis(500);
/// A call at least this long is slow for the breakers.
pub const SLOW_CALL: Duration = Duration::from_millis(250);
/// Workers sending at once.
pub const CONCURRENCY: usize = 64;
/// Models requested, uniformly.
pub const MODELS: u64 = 16;
/// One request in this many is an update (P2C over every backend, never
/// hedged: a hung backend's updates are caught by the timeout).
const UPDATE_EVERY: u64 = 10;
/// How long a request may take before it counts as lost: far over the
/// timeout, the hedge and one retry.
const LOST_AFTER: Duration = Duration::from_secs(10);

type Endpoint = Counted<Timeout<SetOrigin<Client<HttpConnector, Full<Bytes>>>>>;

/// What the driver reads of an answer: its status, and its body's end.
pub struct Reply {
    status: http::StatusCode,
    body: Result<(), BoxError>,
}

type Stack = BoxCloneSyncService<Request<Full<Bytes>>, Reply, BoxError>;

/// The stack over `servers`, its handles, and each backend's count of
/// requests sent to it (in `servers`' order, the balancer's discovery
/// order).
pub struct Built {
    pub stack: Stack,
    pub handle: BalancerHandle,
    pub hedges: HedgeHandle,
    pub sent_to: Vec<Arc<AtomicU64>>,
    /// Each backend's requests, as its endpoint was given them.
    pub logs: Vec<Log>,
    /// Every breaker transition, as the balancer's hook saw it.
    pub transitions: Transitions,
    _probes: BackgroundTask,
}

/// Breaker transitions: when, which backend, what.
pub type Transitions = Arc<Mutex<Vec<(tokio::time::Instant, BackendId, Transition)>>>;

/// Trips from closed among `transitions`.
pub fn trips(transitions: &Transitions) -> Vec<(tokio::time::Instant, BackendId, Transition)> {
    let log = transitions.lock().unwrap_or_else(|e| e.into_inner());
    log.iter()
        .filter(|(_, _, t)| t.from == BreakerState::Closed && t.to == BreakerState::Open)
        .cloned()
        .collect()
}

/// The breakers' open duration, doubling while the fault lasts up to
/// [`MAX_OPEN_DURATION`].
pub const OPEN_DURATION: Duration = Duration::from_millis(500);
/// The longest the breakers stay open.
pub const MAX_OPEN_DURATION: Duration = Duration::from_secs(2);

/// The breakers' policy: small windows, so a fault trips within a few
/// requests; a short open duration, doubling while the fault lasts.
pub fn breaker_policy() -> BreakerConfig {
    BreakerConfig::builder()
        .window(10)
        .minimum_calls(4)
        .failure_rate_threshold(0.5)
        .consecutive_failures(3)
        .slow_call_rate_threshold(0.5)
        .slow_call_duration(SLOW_CALL)
        .half_open_permits(2)
        .open_duration(OPEN_DURATION)
        .max_open_duration(MAX_OPEN_DURATION)
        .build()
        .expect("a valid policy")
}

/// Health: the defaults (evaluated once a second), named so that the
/// suite can bound a readmission.
pub fn health_policy() -> HealthConfig {
    HealthConfig::default()
}

pub fn build(servers: &[&ModelServer]) -> Built {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client = Client::builder(TokioExecutor::new()).build(connector);
    let mut sent_to = Vec::new();
    let mut logs = Vec::new();
    let backends: Vec<_> = servers
        .iter()
        .map(|s| {
            let origin = Origin::http(s.addr());
            let sent = Arc::new(AtomicU64::new(0));
            sent_to.push(sent.clone());
            let log = Log::default();
            logs.push(log.clone());
            let endpoint = Counted {
                inner: Timeout::new(SetOrigin::to(client.clone(), origin.clone()), TIMEOUT),
                sent,
                log,
            };
            let meta = BackendMeta::new(BackendId::new(s.name()).expect("a valid ID"))
                .with_model_slots(s.config().resident_slots())
                .expect("within range")
                .with_address(origin);
            Backend::with_meta(meta, endpoint)
        })
        .collect();
    let transitions = Transitions::default();
    let log = transitions.clone();
    let config = BalanceConfig::builder()
        .on_breaker_transition(move |t: &Transition| {
            let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
            let id = t.backend.clone().expect("a backend breaker's");
            log.push((tokio::time::Instant::now(), id, t.clone()));
        })
        .owners(2)
        .min_owners(2)
        .breaker(breaker_policy())
        .health(health_policy())
        .residency_header(ResidencyHeader::ResidentModels(
            protocol::RESIDENT_MODELS_HEADER,
        ))
        .build()
        .expect("a valid config");
    let balancer: ModelBalancer<Endpoint, Lcg> =
        ModelBalancer::from_rng(ServiceList::new(backends), config, Lcg(7))
            .expect("built inside the runtime");
    let handle = balancer.handle();
    let probes = ProbeConfig::builder()
        .interval(PROBE_ROUND)
        .timeout(Duration::from_millis(250))
        .build()
        .expect("a valid probe config");
    let probes = handle
        .spawn_probes(
            (
                KServeV2::default(),
                PrometheusMetrics::new(ProbeClient::new(), MetricNames::vllm()),
            ),
            probes,
        )
        .expect("inside a Tokio runtime");
    let layer = HedgeLayer::with_load_gate(
        HedgeConfig::default(),
        BalancerLoad::new(handle.clone(), SERVER_CONCURRENCY),
    );
    let hedges = layer.handle();
    let retry = RetryLayer::new(Marked(layer.retry_policy()));
    let stack = ServiceBuilder::new()
        .layer(retry)
        .layer(layer)
        .service(balancer);
    Built {
        stack: finish(stack),
        handle,
        hedges,
        sent_to,
        logs,
        transitions,
        _probes: probes,
    }
}

/// Reads each answer to its end: the balancer sees each request complete.
fn finish<S, B>(service: S) -> Stack
where
    S: Service<Request<Full<Bytes>>, Response = Response<B>> + Clone + Send + Sync + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let service = service
        .map_err(Into::into)
        .and_then(|rsp: Response<B>| async move {
            let status = rsp.status();
            let body = rsp.into_body().collect().await;
            let body = body.map(drop).map_err(Into::into);
            Ok::<_, BoxError>(Reply { status, body })
        });
    BoxCloneSyncService::new(service)
}

/// How a request resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A 2xx answer read to its end.
    Ok,
    /// Another status (a 503 from a fault), read to its end.
    Status,
    /// The answer's body broke off.
    Body,
    /// `NoHealthyBackend`: no backend admitted it.
    NoBackend,
    /// `BreakerOpen`.
    BreakerOpen,
    /// The timeout below the breaker.
    Timeout,
    /// The client could not connect.
    Connect,
    /// Another error of the client (a connection closed before the
    /// answer).
    Client,
    /// Any other error.
    Other,
}

impl Kind {
    pub const ALL: [Kind; 9] = [
        Kind::Ok,
        Kind::Status,
        Kind::Body,
        Kind::NoBackend,
        Kind::BreakerOpen,
        Kind::Timeout,
        Kind::Connect,
        Kind::Client,
        Kind::Other,
    ];

    fn of(result: Result<Reply, BoxError>) -> Self {
        match result {
            Ok(reply) if reply.body.is_err() => Kind::Body,
            Ok(reply) if reply.status.is_success() => Kind::Ok,
            Ok(_) => Kind::Status,
            Err(error) => {
                let error: &(dyn std::error::Error + 'static) = error.as_ref();
                if in_chain::<NoHealthyBackend>(error) {
                    Kind::NoBackend
                } else if in_chain::<BreakerOpen>(error) {
                    Kind::BreakerOpen
                } else if in_chain::<Elapsed>(error) {
                    Kind::Timeout
                } else if let Some(client) =
                    chain(error).find_map(|e| e.downcast_ref::<hyper_util::client::legacy::Error>())
                {
                    if client.is_connect() {
                        Kind::Connect
                    } else {
                        Kind::Client
                    }
                } else {
                    Kind::Other
                }
            }
        }
    }
}

fn chain<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(error), |e| e.source())
}

fn in_chain<T: std::error::Error + 'static>(error: &(dyn std::error::Error + 'static)) -> bool {
    chain(error).any(|e| e.is::<T>())
}

/// Requests sent and how they resolved; those whose model had, when sent,
/// an owner under no scripted fault are also counted apart.
#[derive(Default)]
pub struct Tally {
    pub sent: AtomicU64,
    pub by_kind: [AtomicU64; 9],
    /// Sent while their model had an owner under no fault.
    pub covered: AtomicU64,
    /// Of those, answered 2xx whole.
    pub covered_ok: AtomicU64,
    /// Requests not resolved within `LOST_AFTER`.
    pub lost: AtomicU64,
}

impl Tally {
    pub fn resolved(&self) -> u64 {
        self.by_kind.iter().map(|n| n.load(Ordering::Relaxed)).sum()
    }

    pub fn count(&self, kind: Kind) -> u64 {
        self.by_kind[kind as usize].load(Ordering::Relaxed)
    }
}

/// What the workers share with the timeline.
pub struct Load {
    pub stack: Stack,
    pub handle: BalancerHandle,
    pub tally: Tally,
    /// Which backends (by index) are under a scripted fault now.
    pub faulted: Vec<AtomicBool>,
    /// Requests resolved so far, published after each.
    pub progress: watch::Sender<u64>,
    /// Set when the workers are to stop.
    pub stop: AtomicBool,
    pub ids: Vec<BackendId>,
}

/// One worker: sends requests one after another until told to stop.
pub async fn worker(load: Arc<Load>, seed: u64) {
    let mut rng = Lcg(seed);
    let models: Vec<ModelId> = (0..MODELS)
        .map(|i| ModelId::new(&format!("model-{i}")).expect("a valid ID"))
        .collect();
    while !load.stop.load(Ordering::Relaxed) {
        let model = &models[(rng.next_u64() % MODELS) as usize];
        let kind = match rng.next_u64() % UPDATE_EVERY {
            0 => "update",
            _ => "inference",
        };
        let covered = load.handle.owners(model).iter().any(|owner| {
            let i = load.ids.iter().position(|id| id == owner);
            i.is_some_and(|i| !load.faulted[i].load(Ordering::Relaxed))
        });
        load.tally.sent.fetch_add(1, Ordering::Relaxed);
        if covered {
            load.tally.covered.fetch_add(1, Ordering::Relaxed);
        }
        let req = Request::post(protocol::infer_path(model.as_str()))
            .header("x-model-id", model.as_str())
            .header("x-request-kind", kind)
            .body(Full::from(r#"{"inputs":[]}"#))
            .expect("a valid request");
        let call = load.stack.clone().oneshot(req);
        match tokio::time::timeout(LOST_AFTER, call).await {
            Ok(result) => {
                let kind = Kind::of(result);
                load.tally.by_kind[kind as usize].fetch_add(1, Ordering::Relaxed);
                if covered && kind == Kind::Ok {
                    load.tally.covered_ok.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(_) => {
                load.tally.lost.fetch_add(1, Ordering::Relaxed);
            }
        }
        load.progress.send_modify(|n| *n += 1);
    }
}
