//! The gateway itself, shared by the `gateway` binary (`src/bin/gateway.rs`)
//! and the tests: an axum router whose inference routes go through the
//! middleware's stack to the backends.
//!
//! ```text
//! axum ─► ModelFromBody ─► Hedge ─────────► Retry ─────────► FirstFrame ─────► ModelBalancer ─► per backend: breaker ─► timeout ─► SetOrigin ─► hyper-util client
//!         model ID from     backup after p95,  a 503 or refused  an event stream   affinity, health,                       Elapsed Host
//!         body or path      5% budget, gated   connection once,  answers at its    probes, placement                               hop-by-hop
//!                           (TTFT for streams) elsewhere, within first token
//!                                              the same budget
//! ```
//!
//! With `--kv-events` (precise prefix routing, `app/kv.rs`), a
//! `PromptBlocks` layer between ModelFromBody and Hedge cuts each prompt
//! into the blocks the backends' KV-cache events index, and the balancer
//! sends it where most of them are cached.
//!
//! Besides the inference routes it answers KServe v2's health and
//! metadata routes, so that a KServe v2 client (tritonclient) works
//! through it as against one server: `GET /v2/health/live` (the gateway is
//! up), `GET /v2/health/ready` (the gateway can serve some model: see
//! `app/readiness.rs`), `GET /v2` (the gateway's own metadata),
//! and `GET /v2/models/{name}` (`/versions/{v}`, `/ready`) asked of a
//! backend the probes saw holding the model (`app/metadata.rs`): never
//! routed as inference, so never a load; 404 at once for a model no
//! backend holds.

pub mod access_log;
mod catalog;
mod client;
mod config;
mod connection;
pub mod drain;
mod errors;
mod etcd;
mod forward;
mod kv;
mod limits;
mod log_sink;
mod metadata;
pub mod phases;
mod readiness;
pub mod reply_body;
mod routes;
pub mod send_once;
pub mod server;
mod shared;
mod stack;
pub mod tls;
mod tokenize;
pub mod unresponsive;

use std::time::Duration;

use axum::Router;
use bytes::Bytes;
use http_body_util::Full;
use tower::discover::ServiceList;
use tower::retry::RetryLayer;
use tower::ServiceBuilder;
use tower_model_balance::backend::{Backend, BackendMeta};
use tower_model_balance::balance::{
    AdmissionConfig, BalancerHandle, Limit, ModelBalancer, ResidencyHeader,
};
use tower_model_balance::discover::etcd::EtcdHandle;
use tower_model_balance::endpoint::{Origin, SetOrigin};
use tower_model_balance::error::BoxError;
use tower_model_balance::health::probe::{
    KServeV2, MetricNames, OpenAiModels, ProbeClient, PrometheusMetrics,
};
use tower_model_balance::hedge::{BalancerLoad, FirstFrameLayer, HedgeHandle, HedgeLayer};
use tower_model_balance::placement::KServeV2Loader;
use tower_model_balance::route::ModelFromBodyLayer;
use tower_model_balance::task::BackgroundTask;

use access_log::AccessLog;
use catalog::{Catalog, Catalogued, RepositoryReads};
pub use client::{
    backend_client, backend_tls_client, BackendClient, BackendConnector, POOL_IDLE_TIMEOUT,
};
pub use config::{
    Config, Probe, DEFAULT_BODY_LIMIT, DEFAULT_JSON_BODY_LIMIT, DEFAULT_MAX_BUFFERED_BYTES,
    DEFAULT_MAX_REQUESTS,
};
pub use drain::Drain;
pub use etcd::EtcdMembers;
pub(crate) use kv::endpoints as kv_endpoints;
use kv::Kv;
use limits::Limits;
use phases::Phases;
pub use phases::Timeouts;
pub use routes::INFERENCE_ROUTES;
use routes::{admin_router, prometheus, router};
pub use server::{serve, serve_with, ServeConfig};
use shared::App;
pub use stack::{default_stack, stack_config, Endpoint, Stack, DEFAULTS as STACK_DEFAULTS};
pub use tokenize::{ServerTokenize, TOKENIZE_TIMEOUT};
use unresponsive::Unresponsive;

/// A built gateway: its router, and what keeps its background work alive.
#[derive(Debug)]
pub struct Gateway {
    /// The axum router of client traffic: the inference, health and
    /// metadata routes.
    pub router: Router,
    /// The admin router, for a listener of its own: `GET /metrics` and
    /// readiness (`/ready`, `/health`, `/v2/health/ready`), liveness
    /// (`/live`, `/v2/health/live`).
    pub admin: Router,
    /// The drain, for [`serve_with`]: readiness answers 503 once it
    /// begins, and answers still open end when it is cut.
    pub drain: Drain,
    /// The balancer's handle (counters, backend states).
    pub handle: BalancerHandle,
    /// The hedge's handle (hedges sent, won, suppressed).
    pub hedge: HedgeHandle,
    /// The etcd source's counters (revision, events, snapshots, resumes),
    /// with [`Config::etcd`].
    pub etcd: Option<EtcdHandle>,
    access_log: AccessLog,
    _probes: BackgroundTask,
    _placement: Option<BackgroundTask>,
    /// The subscriptions to the backends' KV-cache events (`--kv-events`).
    _kv_events: Vec<BackgroundTask>,
}

impl Gateway {
    /// Builds the stack and the router, and starts the probes; inside a
    /// Tokio runtime.
    ///
    /// # Errors
    ///
    /// An invalid setting (the crate's `InvalidConfig` names it), or a
    /// metrics recorder of another kind already installed.
    pub fn new(config: Config) -> Result<Self, BoxError> {
        let roots = tls::backend_roots(config.backend_ca.as_deref())?;
        let client = backend_tls_client::<Full<Bytes>>(roots, config.timeouts.connect);
        let timeouts = config.timeouts;
        let metadata_client = client.clone();
        // Precise prefix routing (`--kv-events`): the index the events
        // feed and the balancer reads, and the layer that cuts prompts
        // into its blocks (`app/kv.rs`).
        let kv = Kv::start(&config, &client)?;
        // Backends whose probes go unanswered: their waiting requests cut.
        // With placement a backend is reached (readiness) by a read of
        // its repository, not by a probe: it loads nothing without one.
        let placing = config.placement && config.probe == Probe::KServe;
        let unresponsive = Unresponsive::new(config.timeouts.unresponsive).probes_reach(!placing);
        let cuts = unresponsive.clone();
        let reached = unresponsive.clone();
        // The probes and placement's loads go through the same client as
        // the traffic: `https://` backends are probed and loaded on with
        // the same trust, connect timeout and pool.
        let probe_client = ProbeClient::from_client(client.clone());
        let endpoint = move |origin: &Origin| {
            let backend = SetOrigin::to(client.clone(), origin.clone());
            Phases::new(backend, &timeouts, cuts.watch(origin))
        };
        let backends: Vec<_> = config
            .backends
            .iter()
            .map(|(id, origin)| {
                let mut meta = BackendMeta::new(id.clone()).with_address(origin.clone());
                if let Some(slots) = config.model_slots {
                    meta = meta.with_model_slots(slots)?;
                }
                if let Some((_, metrics)) = config.metrics_origins.iter().find(|(m, _)| m == id) {
                    meta = meta.with_metrics_address(metrics.clone());
                }
                Ok(Backend::with_meta(meta, endpoint(origin)))
            })
            .collect::<Result<_, BoxError>>()?;
        // The gateway's breaker policy and scope, its panic threshold, its
        // probes, placement and hedge: `config.stack` (`app/stack.rs`).
        let mut balance = config.stack.balance.to_builder();
        if let Some(name) = config.residency_header.clone() {
            balance = balance.residency_header(ResidencyHeader::ResidentModels(name));
        }
        if let Some(k) = config.owners {
            balance = balance.owners(k);
        }
        if let Some(load) = config.owner_load {
            balance = balance.owner_load(load);
        }
        if let Some(limit) = config.admission_limit {
            balance = balance.admission(AdmissionConfig::builder(Limit::fixed(limit)).build()?);
        }
        // Receipts for the header and the access log's backend and reason;
        // a file's `receipts = true` stays.
        if config.receipt_header || config.access_log != AccessLog::Off {
            balance = balance.receipts(true);
        }
        if let Some(kv) = &kv {
            balance = balance.kv_index(kv.index.clone());
        }
        let (balancer, etcd) = match &config.etcd {
            None => (
                ModelBalancer::new(ServiceList::new(backends), balance.build()?)?,
                None,
            ),
            // Each record's address, as `--backend`'s origin: its endpoint.
            Some(etcd) => {
                let source = etcd.builder()?.build(endpoint)?;
                let counters = source.handle();
                (
                    ModelBalancer::new(source, balance.build()?)?,
                    Some(counters),
                )
            }
        };
        let handle = balancer.handle();
        let probes = config.stack.probe.clone();
        let metrics = PrometheusMetrics::new(probe_client.clone(), MetricNames::vllm());
        // What the probes find is noted in the catalog too: the models
        // `GET /v1/models` lists, and the only one, if there is one.
        let catalog = Catalog::new();
        let probes = match config.probe {
            Probe::KServe => handle.spawn_probes(
                Catalogued::new(
                    (KServeV2::new(probe_client.clone()), metrics),
                    catalog.clone(),
                    unresponsive,
                ),
                probes,
            )?,
            Probe::OpenAi => handle.spawn_probes(
                Catalogued::new(
                    (OpenAiModels::new(probe_client.clone()), metrics),
                    catalog.clone(),
                    unresponsive,
                ),
                probes,
            )?,
        };
        // Servers that load a model only when told: the balancer loads it
        // on the owner affinity picks (one load per backend and model),
        // unloading what that backend does not own to make room. A request
        // whose owner is still loading goes to a backend that holds the
        // model, if one can take it (`PreferWarm`).
        let placement = match placing {
            true => {
                let policy = config.stack.placement.clone();
                let loader = KServeV2Loader::new(probe_client);
                let loader = RepositoryReads::new(loader, reached.clone());
                Some(handle.enable_placement(loader, policy)?)
            }
            false => None,
        };
        // A backup after the model's p95, within 5% of the requests, and
        // none while the fleet is over 80% of its serving slots (the
        // library's defaults, unless `[hedge]` says otherwise).
        let gate = BalancerLoad::new(handle.clone(), config.backend_slots);
        let hedge = HedgeLayer::with_load_gate(config.stack.hedge.clone(), gate);
        let drain = Drain::new();
        let prometheus = prometheus()?;
        if config.access_log != AccessLog::Off {
            // Its writer started, and its lost lines' series at 0, from
            // the start.
            log_sink::stdout();
        }
        let app = App {
            stack: stack(balancer, &hedge, &config, &catalog, kv.as_ref())?,
            catalog,
            unresponsive: reached,
            handle: handle.clone(),
            hedge: hedge.handle(),
            prometheus,
            limits: Limits::new(&config),
            body_timeout: config.body_timeout,
            timeouts: config.timeouts,
            receipt_header: config.receipt_header,
            drain: drain.clone(),
            access_log: config.access_log,
            client: metadata_client,
            // A metadata answer comes at once from a server holding the
            // model: as long as a stream's first token may take.
            backend_timeout: config.timeouts.first_token,
        };
        Ok(Self {
            router: router(app.clone()),
            admin: admin_router(app),
            drain,
            handle,
            hedge: hedge.handle(),
            etcd,
            access_log: config.access_log,
            _probes: probes,
            _placement: placement,
            _kv_events: kv.map(|kv| kv.tasks).unwrap_or_default(),
        })
    }
}

impl Gateway {
    /// At the exit: waits at most `within` for the access log's queued
    /// lines to be written; the lines lost in all (dropped with the
    /// writer behind, unwritable, or still queued), `None` with the log
    /// off.
    pub fn flush_access_log(&self, within: Duration) -> Option<u64> {
        (self.access_log != AccessLog::Off).then(|| log_sink::stdout().flush(within))
    }
}

/// The request path in front of the balancer.
fn stack(
    balancer: ModelBalancer<Endpoint>,
    hedge: &HedgeLayer,
    config: &Config,
    catalog: &Catalog,
    kv: Option<&Kv>,
) -> Result<Stack, BoxError> {
    // The model from the body or the path, never from the client's
    // routing headers (they are removed): a client could otherwise send any
    // model to any backend, force cold loads there, skip the load cap with
    // a critical urgency, and have another model's traffic counted.
    // A body that names no model is the fleet's only model's, as a vLLM
    // server alone answers it; with several, a 400 that names `model`.
    let catalog = catalog.clone();
    let mut route = ModelFromBodyLayer::builder()
        .limit(config.body_limit.max(config.json_body_limit))
        .strip_routing_headers(true)
        .default_model(move || catalog.only_model());
    // Prefix affinity, for LLM fleets: an OpenAI prompt's first bytes
    // (and the conversation's header) pick the owners, so that requests
    // sharing a system prompt or a conversation find its KV cache.
    if let Some(bytes) = config.prefix_bytes {
        route = route.prefix_bytes(bytes);
    }
    if let Some(name) = config.session_header.clone() {
        route = route.session_header(name);
    }
    let route = route.build()?;
    Ok(ServiceBuilder::new()
        // 1. Route: the model ID from the JSON body or the KServe v2 path,
        //    into the request's `RouteInfo`; 400 / 413 from here.
        .layer(route)
        // 1b. With `--kv-events`: the prompt's blocks, for the balancer to
        //     pick the backend caching most of them (`app/kv.rs`); without,
        //     no layer (`Either`'s other side: the hedge itself).
        .option_layer(kv.map(|kv| kv.layer.clone()))
        // 2. Hedge, between route and balance: its backup carries the
        //    `RouteInfo`, and the balancer sees its `Exclude` and sends it
        //    to another backend. It clones requests: every body is `Full`.
        .layer(hedge.clone())
        // 3. Retry, inside the hedge (it reads the backend the hedge's
        //    slot says the attempt went to): a refused connection or a 503
        //    is sent once more, at once, to another backend, within the
        //    hedge's budget. Nothing of the answer had reached the client.
        .layer(RetryLayer::new(hedge.retry_policy()))
        // 4. First frame: an event stream (`stream: true`) is answered at
        //    its first token, not its head, so that the hedge's delay is
        //    the time to first token and never fires once a token came,
        //    and a stream cut before its first token is retried elsewhere.
        .layer(FirstFrameLayer::new())
        // 5. Balance: affinity to the model's owners, breakers, health,
        //    placement.
        .service(balancer))
}
