//! The gateway itself, shared by `examples/gateway/main.rs` and
//! `tests/gateway.rs`: an axum router whose inference routes go through
//! the crate's stack to the backends.
//!
//! ```text
//! axum ─► ModelFromBody ─► Hedge ─────────► Retry ─────────► ModelBalancer ─► per backend: breaker ─► timeout ─► SetOrigin ─► hyper-util client
//!         model ID from     backup after p95,  a 503 or refused  affinity, health,                       Elapsed
//!         body or path      5% budget, gated   connection once,  probes, placement
//!                                              elsewhere, within
//!                                              the same budget
//! ```
//!
//! Besides the inference routes it answers KServe v2's health and
//! metadata routes, so that a KServe v2 client (tritonclient) works
//! through it as against one server: `GET /v2/health/live` (the gateway is
//! up), `GET /v2/health/ready` (some backend can take requests: its
//! breaker not open, not ejected), `GET /v2` (the gateway's own metadata),
//! and `GET /v2/models/{name}` (`/versions/{v}`, `/ready`) forwarded to an
//! owner of the model, which loads it first with placement on.

#[path = "errors.rs"]
pub mod errors;

use std::future::Future;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Path;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::server::conn::http1;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tower::discover::ServiceList;
use tower::retry::{Retry, RetryLayer};
use tower::timeout::Timeout;
use tower::{ServiceBuilder, ServiceExt};
use tower_model_balance::backend::BackendId;
use tower_model_balance::balance::BackgroundTask;
use tower_model_balance::balance::{
    Backend, BackendMeta, BalanceConfig, BalancerHandle, BreakerScope, ModelBalancer,
    ResidencyHeader,
};
use tower_model_balance::breaker::BreakerState;
use tower_model_balance::breaker::Policy;
use tower_model_balance::endpoint::{Origin, SetOrigin};
use tower_model_balance::error::BoxError;
use tower_model_balance::error::PayloadTooLarge;
use tower_model_balance::health::probe::{
    KServeV2, MetricNames, OpenAiModels, ProbeConfig, PrometheusMetrics,
};
use tower_model_balance::hedge::{
    BalancerLoad, Hedge, HedgeHandle, HedgeLayer, HedgePolicy, RetryPolicy,
};
use tower_model_balance::placement::{KServeV2Loader, PlacementPolicy, WhenCold};
use tower_model_balance::route::{
    ModelFromBody, ModelFromBodyLayer, ModelId, RouteInfo, MODEL_ID_HEADER, REQUEST_KIND_HEADER,
    URGENCY_HEADER,
};

use errors::ErrorReply;

/// What the client sends a backend: the request's own body, read whole
/// under the limit first (`Left`: KServe v2 paths, whose model is in the
/// path), or the body the route layer buffered to find the model
/// (`Right`). Both are `Full`, so the hedge can send a request twice.
pub type ClientBody = Either<Full<Bytes>, Full<Bytes>>;
/// One backend's endpoint: the shared client pointed at its origin, under
/// a timeout (inside the balancer's breaker, so a hung call is a failure).
pub type Endpoint = Timeout<SetOrigin<Client<HttpConnector, ClientBody>>>;
/// The whole request path.
pub type Stack = ModelFromBody<Hedge<Retry<RetryPolicy, ModelBalancer<Endpoint>>>>;

/// The routes forwarded to the backends, as they are.
pub const INFERENCE_ROUTES: [&str; 5] = [
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v2/models/{name}/infer",
    "/v2/models/{name}/versions/{version}/infer",
];

/// Which model-server API the health probes ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// KServe v2 readiness and repository index (Triton, KServe, the
    /// simulator), and vLLM-style metrics.
    KServe,
    /// The OpenAI model list and vLLM's metrics (vLLM, SGLang, TGI).
    OpenAi,
}

/// How the gateway is set up.
#[derive(Debug, Clone)]
pub struct Config {
    /// The backends: an ID and the origin to send to.
    pub backends: Vec<(BackendId, Origin)>,
    /// The most body bytes read to find the model (413 past it).
    pub body_limit: usize,
    /// The most a backend may take to answer (its response headers).
    pub timeout: Duration,
    /// The API the probes ask.
    pub probe: Probe,
    /// How often each backend is probed.
    pub probe_interval: Duration,
    /// A response header listing the models resident on the backend (the
    /// simulator's), if the backends send one.
    pub residency_header: Option<HeaderName>,
    /// The most a client may take to send a request's body (408 past it):
    /// a client that trickles its body must not hold a connection and a
    /// buffer for ever.
    pub body_timeout: Duration,
    /// Requests each backend serves at once: the hedge sends no backup
    /// while the requests in flight exceed 80% (the hedge policy's
    /// default `max_utilization`) of this × the backends.
    pub backend_slots: usize,
    /// Where a backend serves its Prometheus metrics, when not on its own
    /// origin (MLServer: its `metrics_port`).
    pub metrics_origins: Vec<(BackendId, Origin)>,
    /// Whether the gateway loads models where affinity places them,
    /// through the KServe v2 repository API (`POST
    /// /v2/repository/models/{name}/load`), for servers in explicit
    /// model-control mode (MLServer with `load_models_at_startup: false`,
    /// Triton with `--model-control-mode=explicit`). Only with KServe v2
    /// probes.
    pub placement: bool,
}

/// The default body limit: 64 MiB. A KServe v2 request carries its
/// tensors in the body — as JSON (a 224×224 RGB image is about 2 MB of
/// text) or, with tritonclient's binary extension, raw — and the gateway
/// reads each body whole before routing (to find the model, and to send
/// it again for a hedge or retry), so the limit bounds the memory a
/// request may hold: 64 MiB × the requests in flight at most.
pub const DEFAULT_BODY_LIMIT: usize = 64 * 1024 * 1024;

impl Config {
    /// Defaults for `backends`: a 64 MiB body limit, a 60 s timeout, KServe
    /// v2 probes every second, placement on, no residency header.
    pub fn new(backends: Vec<(BackendId, Origin)>) -> Self {
        Self {
            backends,
            body_limit: DEFAULT_BODY_LIMIT,
            timeout: Duration::from_secs(60),
            probe: Probe::KServe,
            probe_interval: Duration::from_secs(1),
            residency_header: None,
            body_timeout: Duration::from_secs(30),
            backend_slots: 4,
            metrics_origins: Vec::new(),
            placement: true,
        }
    }
}

/// A built gateway: its router, and what keeps its background work alive.
#[derive(Debug)]
pub struct Gateway {
    /// The axum router: the inference routes and `GET /metrics`.
    pub router: Router,
    /// The balancer's handle (counters, backend states).
    pub handle: BalancerHandle,
    /// The hedge's handle (hedges sent, won, suppressed).
    pub hedge: HedgeHandle,
    _probes: BackgroundTask,
    _placement: Option<BackgroundTask>,
}

/// What every handler shares.
#[derive(Clone)]
struct App {
    stack: Stack,
    handle: BalancerHandle,
    hedge: HedgeHandle,
    prometheus: PrometheusHandle,
    /// The most body bytes a request may send.
    body_limit: usize,
    /// The most a request's body may take to arrive.
    body_timeout: Duration,
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
        // No Nagle: a request's head and body go out as written, not held
        // back until the server acknowledges the last segment (with
        // delayed ACKs, a 40 ms stall per request on a kept-alive
        // connection).
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            // Idle connections are dropped before the server drops them:
            // uvicorn, which MLServer, KServe's server and vLLM run on,
            // closes a kept-alive connection after 5 s idle, and a request
            // sent on it as it closes fails (`SendRequest`, a 502).
            .pool_idle_timeout(Duration::from_secs(4))
            // Without a timer the idle timeout is never checked.
            .pool_timer(TokioTimer::new())
            .build::<_, ClientBody>(connector);
        let backends: Vec<_> = config
            .backends
            .iter()
            .map(|(id, origin)| {
                let endpoint = SetOrigin::to(client.clone(), origin.clone());
                let mut meta = BackendMeta::new(id.clone()).with_address(origin.clone());
                if let Some((_, metrics)) = config.metrics_origins.iter().find(|(m, _)| m == id) {
                    meta = meta.with_metrics_address(metrics.clone());
                }
                Backend::with_meta(meta, Timeout::new(endpoint, config.timeout))
            })
            .collect();
        let mut balance = BalanceConfig::builder()
            // Three 5xx in a row open a breaker (the default failure rate
            // needs 10 calls first): a gateway in front of a few backends
            // fails fast sooner.
            .breaker(Policy::builder().consecutive_failures(3).build()?)
            // One breaker per (backend, model): a model that fails on
            // every server (a broken runtime, a model answering 500 to
            // every inference) opens its own breakers, not the servers'
            // — with one breaker per backend, a few clients sending it
            // opened every breaker and the fleet answered 503 to healthy
            // models. A server that is down fails every model's pair, and
            // its probes fail: health ejects it within a probe round.
            .breaker_scope(BreakerScope::BackendModel { max_pairs: 100_000 })
            // No panic mode: the backends whose breakers admit take the
            // traffic, and when none does the gateway answers 503 with
            // Retry-After at once, rather than route over backends that
            // are failing. (Health alone ejects at most 30% of the fleet,
            // so it cannot empty it.)
            .panic_threshold(0.0);
        if let Some(name) = config.residency_header.clone() {
            balance = balance.residency_header(ResidencyHeader::ResidentModels(name));
        }
        let balancer = ModelBalancer::new(ServiceList::new(backends), balance.build()?)?;
        let handle = balancer.handle();
        let probes = ProbeConfig::builder()
            .interval(config.probe_interval)
            .timeout(config.probe_interval.min(Duration::from_millis(500)))
            .build()?;
        let metrics = PrometheusMetrics::new(MetricNames::vllm());
        let probes = match config.probe {
            Probe::KServe => handle.spawn_probes((KServeV2::new(), metrics), probes),
            Probe::OpenAi => handle.spawn_probes((OpenAiModels::new(), metrics), probes),
        };
        // Servers that load a model only when told: the balancer loads it
        // on the owner affinity picks (one load per backend and model),
        // unloading what that backend does not own to make room. A request
        // whose owner is still loading goes to a backend that holds the
        // model, if one can take it (`PreferWarm`).
        let placement = match (config.placement, config.probe) {
            (true, Probe::KServe) => {
                let policy = PlacementPolicy::builder()
                    .when_cold(WhenCold::PreferWarm)
                    .build()?;
                Some(handle.enable_placement(KServeV2Loader::new(), policy)?)
            }
            _ => None,
        };
        // A backup after the model's p95, within 5% of the requests, and
        // none while the fleet is over 80% of its serving slots.
        let gate = BalancerLoad::new(handle.clone(), config.backend_slots);
        let hedge = HedgeLayer::with_load_gate(HedgePolicy::default(), gate);
        let app = App {
            stack: stack(balancer, &hedge, config.body_limit)?,
            handle: handle.clone(),
            hedge: hedge.handle(),
            prometheus: prometheus()?,
            body_limit: config.body_limit,
            body_timeout: config.body_timeout,
        };
        Ok(Self {
            router: router(app),
            handle,
            hedge: hedge.handle(),
            _probes: probes,
            _placement: placement,
        })
    }
}

/// The request path in front of the balancer.
fn stack(
    balancer: ModelBalancer<Endpoint>,
    hedge: &HedgeLayer,
    body_limit: usize,
) -> Result<Stack, BoxError> {
    let route = ModelFromBodyLayer::builder().limit(body_limit).build()?;
    Ok(ServiceBuilder::new()
        // 1. Route: the model ID from the JSON body or the KServe v2 path,
        //    into the request's `RouteInfo`; 400 / 413 from here.
        .layer(route)
        // 2. Hedge, between route and balance: its backup carries the
        //    `RouteInfo`, and the balancer sees its `Exclude` and sends it
        //    to another backend. It clones requests: every body is `Full`.
        .layer(hedge.clone())
        // 3. Retry, inside the hedge (it reads the backend the hedge's
        //    slot says the attempt went to): a refused connection or a 503
        //    is sent once more, at once, to another backend, within the
        //    hedge's budget. Nothing of the answer had reached the client.
        .layer(RetryLayer::new(hedge.retry_policy()))
        // 4. Balance: affinity to the model's owners, breakers, health,
        //    placement.
        .service(balancer))
}

/// The most a client may take to send a request's headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connections may finish their requests once shutdown begins.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Serves `router` on `listener` over HTTP/1 until `shutdown` resolves,
/// then lets open connections finish for at most [`SHUTDOWN_GRACE`].
///
/// Unlike `axum::serve`, each connection has a header-read timeout
/// ([`HEADER_TIMEOUT`]: a client that trickles its headers is cut off), and
/// shutdown is bounded: a client that never finishes cannot keep the
/// gateway up.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    // Answers go out as written (see the client's nodelay).
                    if let Err(error) = stream.set_nodelay(true) {
                        tracing::debug!(%error, "TCP_NODELAY not set");
                    }
                    stream
                }
                // Out of file descriptors, a connection reset before it
                // was accepted: the next accept may succeed.
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let service = TowerToHyperService::new(router.clone());
        let connection = http.serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the shutdown grace; closing");
    }
    Ok(())
}

/// KServe v2 model metadata and readiness, forwarded to an owner of the
/// model.
pub const MODEL_ROUTES: [&str; 4] = [
    "/v2/models/{name}",
    "/v2/models/{name}/ready",
    "/v2/models/{name}/versions/{version}",
    "/v2/models/{name}/versions/{version}/ready",
];

fn router(app: App) -> Router {
    let mut router = Router::new()
        .route("/metrics", get(metrics))
        .route("/v2/health/live", get(live))
        .route("/v2/health/ready", get(ready))
        .route("/v2", get(server_metadata));
    for path in INFERENCE_ROUTES {
        router = router.route(path, post(forward));
    }
    for path in MODEL_ROUTES {
        router = router.route(path, get(model_metadata));
    }
    router
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .with_state(app)
}

/// Sends the request through the stack and the backend's answer back; an
/// error of the stack becomes the gateway's own answer.
async fn forward(State(app): State<App>, req: Request) -> Response {
    let (mut parts, body) = req.into_parts();
    // Errors in the shape of the route's protocol (KServe v2 or OpenAI).
    let path = parts.uri.path().to_owned();
    let reply = |reply: errors::ErrorReply| reply.for_path(&path).into_response();
    strip_hop_by_hop(&mut parts.headers);
    // The client sets the backend's own Host from the origin.
    parts.headers.remove(header::HOST);
    // The model comes from the body or the path, never from the client's
    // routing headers: a client could otherwise send any model to any
    // backend, force cold loads there, skip the load cap with a critical
    // urgency, and have another model's traffic counted.
    for name in [MODEL_ID_HEADER, REQUEST_KIND_HEADER, URGENCY_HEADER] {
        parts.headers.remove(name);
    }
    // A body announced over the limit is refused before it is read.
    let announced = parts.headers.get(header::CONTENT_LENGTH);
    let announced = announced.and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if announced.is_some_and(|length| length > app.body_limit as u64) {
        let error = PayloadTooLarge::new(app.body_limit);
        return reply(errors::classify(&error));
    }
    // The whole body first, under the limit and the deadline: a body the
    // client breaks off or trickles is its error (400, 408), found here,
    // never a failure the balancer would count against a backend; and a
    // KServe v2 body has the limit too.
    let read = axum::body::to_bytes(body, app.body_limit);
    let body = match tokio::time::timeout(app.body_timeout, read).await {
        Ok(Ok(bytes)) => Full::new(bytes),
        Ok(Err(error)) => return reply(errors::unreadable_body(&error, app.body_limit)),
        Err(_) => return reply(errors::body_timeout(app.body_timeout)),
    };
    match app.stack.oneshot(Request::from_parts(parts, body)).await {
        Ok(response) => {
            let (mut parts, body) = response.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            // The body streams on; the balancer counts the request done
            // when it ends.
            Response::from_parts(parts, Body::new(body))
        }
        Err(error) => reply(errors::classify(&*error)),
    }
}

/// `GET /v2/health/live`: the gateway is up.
async fn live() -> StatusCode {
    StatusCode::OK
}

/// `GET /v2/health/ready`: 200 while some backend can take requests (its
/// breaker not open, health not ejected), else 503.
async fn ready(State(app): State<App>) -> StatusCode {
    let serving = app
        .handle
        .backends()
        .iter()
        .any(|b| b.breaker != BreakerState::Open && !b.ejected);
    match serving {
        true => StatusCode::OK,
        false => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// `GET /v2`: the KServe v2 server metadata of the gateway itself.
async fn server_metadata() -> Response {
    let body = serde_json::json!({
        "name": "tower-model-balance-gateway",
        "version": env!("CARGO_PKG_VERSION"),
        "extensions": [],
    });
    let json = HeaderValue::from_static("application/json");
    ([(header::CONTENT_TYPE, json)], body.to_string()).into_response()
}

/// `GET /v2/models/{name}…`: forwarded to an owner of the model, as an
/// inference request of that model is (placement loads it there first).
async fn model_metadata(
    State(app): State<App>,
    params: Result<Path<Vec<(String, String)>>, axum::extract::rejection::PathRejection>,
    mut req: Request,
) -> Response {
    let path = req.uri().path().to_owned();
    let name = match &params {
        Ok(Path(params)) => params
            .iter()
            .find(|(k, _)| k == "name")
            .map(|(_, v)| v.as_str()),
        // Not UTF-8 once percent-decoded: no model ID.
        Err(_) => Some(""),
    };
    let model = match name.map(ModelId::new) {
        Some(Ok(model)) => model,
        Some(Err(error)) => return errors::classify(&error).for_path(&path).into_response(),
        None => return no_route(req).await,
    };
    req.extensions_mut().insert(RouteInfo::new(model));
    forward(State(app), req).await
}

/// `GET /metrics`: the balancer's figures, read now, in Prometheus text.
async fn metrics(State(app): State<App>) -> Response {
    tower_model_balance::metrics::record(&app.handle);
    tower_model_balance::metrics::record_hedge(&app.hedge);
    app.prometheus.run_upkeep();
    let content_type = HeaderValue::from_static("text/plain; version=0.0.4");
    let mut response = app.prometheus.render().into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, content_type);
    response
}

async fn no_route(req: Request) -> Response {
    let message = format!("no route for {} {}", req.method(), req.uri().path());
    ErrorReply::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "not_found",
        message,
    )
    .for_path(req.uri().path())
    .into_response()
}

async fn wrong_method(req: Request) -> Response {
    let message = format!("{} is not allowed on {}", req.method(), req.uri().path());
    ErrorReply::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request_error",
        "method_not_allowed",
        message,
    )
    .for_path(req.uri().path())
    .into_response()
}

/// The process's Prometheus recorder: installed as the global `metrics`
/// recorder on first use, shared by every gateway of the process after.
fn prometheus() -> Result<PrometheusHandle, BoxError> {
    static HANDLE: Mutex<Option<PrometheusHandle>> = Mutex::new(None);
    let mut slot = HANDLE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(handle) = slot.as_ref() {
        return Ok(handle.clone());
    }
    let handle = PrometheusBuilder::new().install_recorder()?;
    // The `# HELP` lines of every series.
    tower_model_balance::metrics::describe();
    metrics::describe_counter!(
        errors::ERRORS_SERIES,
        "error answers the gateway gave itself, by OpenAI error code"
    );
    *slot = Some(handle.clone());
    Ok(handle)
}

/// Removes the hop-by-hop headers (RFC 9110, section 7.6.1): those the
/// `Connection` header names, and the fixed list. They describe one
/// connection, not the message a proxy passes on.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in [
        header::CONNECTION,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
        header::TE,
        header::TRAILER,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_are_stripped() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("connection", "keep-alive, x-hop"),
            ("keep-alive", "timeout=5"),
            ("x-hop", "1"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("te", "trailers"),
            ("content-type", "application/json"),
            ("content-length", "12"),
            ("x-model-id", "m"),
        ] {
            headers.append(name, HeaderValue::from_static(value));
        }
        strip_hop_by_hop(&mut headers);
        let mut left: Vec<_> = headers.keys().map(|k| k.as_str()).collect();
        left.sort_unstable();
        assert_eq!(left, ["content-length", "content-type", "x-model-id"]);
    }
}
