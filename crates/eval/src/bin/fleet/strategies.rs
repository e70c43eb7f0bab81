//! The routing strategies compared, each a `Service` over the same
//! hyper-util client.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;

use tower::balance::p2c::Balance;
use tower::buffer::Buffer;
use tower::discover::ServiceList;
use tower::load::{CompleteOnResponse, PeakEwmaDiscover};

use tower::util::rng::Rng;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, Layer, Service, ServiceExt};
use tower_model_balance::backend::{Backend, BackendId, BackendMeta};
use tower_model_balance::balance::{
    AdmissionConfig, BalanceConfigBuilder, BalancerHandle, Limit, ModelBalancer, ResidencyHeader,
};
use tower_model_balance::endpoint::Origin;
use tower_model_balance::health::probe::{
    KServeV2, MetricNames, ProbeClient, ProbeConfig, PrometheusMetrics,
};
use tower_model_balance::hedge::{
    BalancerLoad, FirstFrameLayer, HedgeConfig, HedgeHandle, HedgeLayer,
};
use tower_model_balance::placement::{KServeV2Loader, PlacementConfig, WaitedForLoad, WhenCold};
use tower_model_balance::ring::{Ring, RingConfig};
use tower_model_balance::route::{ModelFromBodyLayer, RouteInfo};
use tower_model_balance::task::BackgroundTask;
use tower_model_balance_sim::{protocol, ModelServer, ServerConfig};

use crate::chwbl::Chwbl;
use crate::endpoint::{endpoints, Endpoint};
use crate::etcd::Registered;
use crate::stream::{self, Streamed};

/// What the driver reads of a response: its status and whether the request
/// paid a cold load. The body is read to its end inside the service, so the
/// balancer sees each request complete.
#[derive(Debug, Clone, Copy)]
pub struct Reply {
    pub ok: bool,
    pub cold: bool,
    /// What the client saw of an event stream (`--stream`).
    pub stream: Option<Streamed>,
    /// The backend that answered: `i` of the sim's `sim-{i}`.
    pub backend: Option<u16>,
}

type BoxFuture<T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, BoxError>> + Send>>;

pub type Strategy = BoxCloneSyncService<Request<Full<Bytes>>, Reply, BoxError>;

/// A strategy and the handles the report reads.
pub struct Built {
    pub strategy: Strategy,
    /// The balancer's handle and its probe task (`model_aware*`).
    pub balancer: Option<(BalancerHandle, BackgroundTask)>,
    /// Placement's task (`model_aware*` with `--explicit-load`).
    pub placement: Option<BackgroundTask>,
    /// The hedging layer's handle (`model_aware_hedged`).
    pub hedge: Option<HedgeHandle>,
}

/// The servers a strategy routes over, and, with `--etcd`, their records
/// there, from which the `model_aware*` balancers learn them.
#[derive(Clone, Copy)]
pub struct Fleet<'a> {
    pub servers: &'a [ModelServer],
    pub etcd: Option<&'a Registered>,
}

impl<'a> Fleet<'a> {
    pub fn new(servers: &'a [ModelServer], etcd: Option<&'a Registered>) -> Self {
        Self { servers, etcd }
    }
}

/// Builds strategy `name` over `fleet`, whose servers run `config` (its
/// resident slots and serving slots), the balancer's settings starting
/// from `balance` (the scenario's owners and load factor); the balancer's
/// handle and its probe task, and the hedging layer's handle, when it has
/// them. With `route`, the `model_aware*` balancers read each request's
/// route from its body through that layer; with `fleet.etcd`, they learn
/// the servers from etcd.
pub fn build(
    name: &str,
    fleet: Fleet<'_>,
    config: &ServerConfig,
    seed: u64,
    explicit_load: bool,
    balance: BalanceConfigBuilder,
    route: Option<ModelFromBodyLayer>,
) -> Built {
    let servers = fleet.servers;
    let endpoints = endpoints(servers);
    let plain = |strategy| Built {
        strategy,
        balancer: None,
        hedge: None,
        placement: None,
    };
    match name {
        "round_robin" => plain(finish(Select::round_robin(endpoints))),
        "p2c" => {
            let list = ServiceList::new(endpoints.into_iter().map(|(_, e)| e).collect::<Vec<_>>());
            let discover = PeakEwmaDiscover::new(
                list,
                Duration::from_millis(30),
                Duration::from_secs(10),
                CompleteOnResponse::default(),
            );
            plain(finish(Buffer::new(Balance::new(discover), 4096)))
        }
        "consistent_hash" => plain(finish(Select::consistent_hash(endpoints))),
        "chwbl" => plain(finish(Chwbl::new(endpoints))),
        "model_aware" | "model_aware_hedged" | "model_aware_admission" => {
            let (model_slots, per_backend) = (config.resident_slots(), config.concurrency());
            let backends = endpoints.into_iter().zip(servers).map(|((id, e), server)| {
                let meta = BackendMeta::new(id)
                    .with_model_slots(model_slots)
                    .expect("the scenario's slots are within 1..=16")
                    .with_address(Origin::http(server.addr()));
                Backend::with_meta(meta, e)
            });
            let mut config = balance.residency_header(ResidencyHeader::ResidentModels(
                protocol::RESIDENT_MODELS_HEADER,
            ));
            if name == "model_aware_admission" {
                // As many in flight per backend as it serves at once (its
                // serving slots, vLLM's `--max-num-seqs`): what is past
                // that waits in the server's queue, where no other
                // backend can take it.
                let admission = AdmissionConfig::builder(Limit::fixed(per_backend))
                    .build()
                    .expect("a valid admission config");
                config = config.admission(admission);
            }
            let config = config.build().expect("a valid config");
            let balancer = match fleet.etcd {
                None => ModelBalancer::from_rng(
                    ServiceList::new(backends.collect::<Vec<_>>()),
                    config,
                    SplitMix(seed),
                ),
                // The same servers with the same metadata, from their records.
                Some(etcd) => ModelBalancer::from_rng(etcd.source(), config, SplitMix(seed)),
            }
            .expect("built inside the runtime");
            let handle = balancer.handle();
            // Readiness and resident models from KServe v2, queue depth and
            // KV-cache usage from the vLLM-style metrics, once a second.
            let prober = (
                KServeV2::default(),
                PrometheusMetrics::new(ProbeClient::new(), MetricNames::vllm()),
            );
            let probes = ProbeConfig::builder()
                .interval(Duration::from_secs(1))
                .timeout(Duration::from_millis(500))
                .build()
                .expect("a valid probe config");
            let probes = handle
                .spawn_probes(prober, probes)
                .expect("inside a Tokio runtime");
            // Servers that load only when told: the balancer places models.
            let placement = explicit_load.then(|| {
                handle
                    .enable_placement(KServeV2Loader::default(), placement_policy())
                    .expect("enabled once, inside the runtime")
            });
            if name != "model_aware_hedged" {
                let strategy = match route {
                    Some(route) => finish(route.layer(balancer)),
                    None => finish(balancer),
                };
                return Built {
                    strategy,
                    balancer: Some((handle, probes)),
                    hedge: None,
                    placement,
                };
            }
            // The same stack with the hedging layer outermost: the default
            // policy (p95 per model, 5% budget), gated on the balancer's
            // in-flight requests against the servers' serving slots; with
            // `FirstFrame` below it, a stream's attempt answers at its
            // first token (a hedge on TTFT, none once a token came).
            let gate = BalancerLoad::new(handle.clone(), per_backend);
            let layer = HedgeLayer::with_load_gate(HedgeConfig::default(), gate);
            let hedge = layer.handle();
            let balancer = FirstFrameLayer::new().layer(balancer);
            Built {
                strategy: finish(layer.layer(balancer)),
                balancer: Some((handle, probes)),
                hedge: Some(hedge),
                placement,
            }
        }
        other => unreachable!("unknown strategy {other}"),
    }
}

/// Placement for the explicit-load runs: a request whose owner must load
/// its model goes to a backend already serving it, if one admits, while
/// the owner loads.
fn placement_policy() -> PlacementConfig {
    PlacementConfig::builder()
        .when_cold(WhenCold::PreferWarm)
        .build()
        .expect("a valid placement policy")
}

/// SplitMix64 (Steele, Lea and Flood, 2014): the balancer's P2C samples
/// from the workload's seed, so a run repeats its choices.
#[derive(Debug, Clone)]
struct SplitMix(u64);

impl Rng for SplitMix {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Reads the response to its end and keeps what the report needs.
fn finish<S, B>(service: S) -> Strategy
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
            // The server loaded the model for it, or it waited while the
            // balancer had it loaded (explicit mode).
            let cold = rsp
                .headers()
                .get(protocol::COLD_LOAD_HEADER)
                .is_some_and(|v| v == "true")
                || rsp.extensions().get::<WaitedForLoad>().is_some();
            let ok = rsp.status().is_success();
            let backend = rsp
                .headers()
                .get(protocol::BACKEND_HEADER)
                .and_then(|v| v.to_str().ok()?.strip_prefix("sim-")?.parse().ok());
            let events = rsp
                .headers()
                .get(http::header::CONTENT_TYPE)
                .is_some_and(|v| v == "text/event-stream");
            // An event stream is read frame by frame, its tokens timed;
            // it succeeds only through `[DONE]`.
            let stream = stream::read(rsp.into_body(), events).await?;
            let ok = ok && stream.is_none_or(|s| s.complete);
            Ok::<_, BoxError>(Reply {
                ok,
                cold,
                stream,
                backend,
            })
        });
    BoxCloneSyncService::new(service)
}

/// Chooses an endpoint index for a request.
type Choose = Arc<dyn Fn(&Request<Full<Bytes>>) -> Result<usize, BoxError> + Send + Sync>;

/// A baseline strategy: `choose` picks the endpoint, nothing else is
/// tracked (no breaker, no load).
#[derive(Clone)]
struct Select {
    endpoints: Arc<Vec<Endpoint>>,
    choose: Choose,
}

impl Select {
    /// Each request to the next backend in turn.
    fn round_robin(endpoints: Vec<(BackendId, Endpoint)>) -> Self {
        let n = endpoints.len();
        let next = AtomicUsize::new(0);
        Self::new(
            endpoints,
            Arc::new(move |_| Ok(next.fetch_add(1, Ordering::Relaxed) % n)),
        )
    }

    /// Plain consistent hashing: each model to its first owner on the ring.
    fn consistent_hash(endpoints: Vec<(BackendId, Endpoint)>) -> Self {
        let members = endpoints.iter().map(|(id, _)| (id.clone(), 1));
        let ring = Ring::build(&RingConfig::default(), members).expect("distinct IDs");
        Self::new(
            endpoints,
            Arc::new(move |req| {
                let route = RouteInfo::from_request(req)?;
                let owner = ring.walk(route.model.hash64()).next();
                owner.ok_or_else(|| "no backends".into())
            }),
        )
    }

    fn new(endpoints: Vec<(BackendId, Endpoint)>, choose: Choose) -> Self {
        let endpoints = Arc::new(endpoints.into_iter().map(|(_, e)| e).collect());
        Self { endpoints, choose }
    }
}

impl Service<Request<Full<Bytes>>> for Select {
    type Response = Response<hyper::body::Incoming>;
    type Error = BoxError;
    type Future = BoxFuture<Self::Response>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Full<Bytes>>) -> Self::Future {
        match (self.choose)(&req) {
            Ok(i) => {
                let endpoint = self.endpoints[i].clone();
                Box::pin(async move { endpoint.oneshot(req).await.map_err(BoxError::from) })
            }
            Err(error) => Box::pin(async move { Err(error) }),
        }
    }
}
