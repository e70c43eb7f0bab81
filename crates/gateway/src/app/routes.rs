//! The gateway's routes: the inference routes forwarded through the
//! stack, KServe v2 health and metadata, OpenAI's model list from the
//! fleet, the health and information routes of vLLM, SGLang and TGI,
//! `GET /metrics`, JSON errors for the rest. The stack strips what a proxy must from requests (the route
//! layer the client's routing headers, `SetOrigin` the hop-by-hop headers,
//! and it sets the backend's `Host`); the hop-by-hop headers of responses
//! are stripped here.

use std::sync::{Mutex, PoisonError};

use axum::extract::Path;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tower_model_balance::error::BoxError;
use tower_model_balance::route::{ModelId, RouteInfo};

use super::access_log::log_requests;
use super::connection;
use super::errors::{self, no_model_served, ErrorReply};
use super::forward::forward;
use super::readiness;
use super::shared::App;

/// The routes forwarded to the backends, as they are, to an owner of the
/// model the body (or the KServe v2 path) names: OpenAI's, and those
/// vLLM, SGLang and TGI add (tokenizing, scoring, pooling, Anthropic's
/// messages, TGI's and SGLang's `/generate`, SageMaker's `/invocations`).
/// A body that names no model goes to the fleet's only model, if it
/// serves one (`catalog`).
pub const INFERENCE_ROUTES: [&str; 19] = [
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/responses",
    "/v1/messages",
    "/v1/score",
    "/v1/rerank",
    "/v2/rerank",
    "/score",
    "/rerank",
    "/pooling",
    "/classify",
    "/tokenize",
    "/detokenize",
    "/generate",
    "/generate_stream",
    "/invocations",
    "/v2/models/{name}/infer",
    "/v2/models/{name}/versions/{version}/infer",
];

/// Information about the server, of vLLM (`/version`), TGI (`/info`) and
/// SGLang (`/get_model_info`, `/get_server_info`): forwarded to a backend
/// that serves one of the fleet's models (an owner of it).
pub const SERVER_ROUTES: [&str; 4] = ["/version", "/info", "/get_model_info", "/get_server_info"];

/// KServe v2 model metadata and readiness, asked of a backend that holds
/// the model (`metadata.rs`); never routed as inference, never a load.
pub const MODEL_ROUTES: [&str; 4] = [
    "/v2/models/{name}",
    "/v2/models/{name}/ready",
    "/v2/models/{name}/versions/{version}",
    "/v2/models/{name}/versions/{version}/ready",
];

pub fn router(app: App) -> Router {
    let mut router = Router::new()
        .route("/v2/health/live", get(live))
        .route("/v2/health/ready", get(ready))
        // vLLM's, SGLang's and TGI's health; SageMaker's `/ping`.
        .route("/health", get(ready))
        .route("/ping", get(ready).post(ready))
        .route("/v2", get(server_metadata))
        .route("/v1/models", get(list_models))
        .route("/v1/models/{model}", get(retrieve_model));
    for path in SERVER_ROUTES {
        router = router.route(path, get(server_info));
    }
    for path in INFERENCE_ROUTES {
        router = router.route(path, post(forward));
    }
    for path in MODEL_ROUTES {
        router = router.route(path, get(model_metadata));
    }
    let log = axum::middleware::from_fn_with_state(app.access_log, log_requests);
    router
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .with_state(app)
        .layer(log)
}

/// The admin listener's routes: `GET /metrics`, readiness (`/ready`,
/// `/health`, `/v2/health/ready`) and liveness (`/live`,
/// `/v2/health/live`), apart from client traffic.
pub fn admin_router(app: App) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/ready", get(ready))
        .route("/health", get(ready))
        .route("/v2/health/ready", get(ready))
        .route("/live", get(live))
        .route("/v2/health/live", get(live))
        .fallback(no_route)
        .with_state(app)
}

/// `GET /v2/health/live`: the gateway is up.
async fn live() -> StatusCode {
    StatusCode::OK
}

/// `GET /v2/health/ready`: 200 while the gateway can serve some model
/// (`readiness.rs`), else 503; 503 from the start of the drain.
async fn ready(State(app): State<App>) -> StatusCode {
    if app.drain.is_draining() {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    match readiness::can_serve(&app.handle, &app.catalog, &app.unresponsive) {
        true => StatusCode::OK,
        false => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// `GET /v2`: the KServe v2 server metadata of the gateway itself.
async fn server_metadata() -> Response {
    json(&serde_json::json!({
        "name": "tower-model-balance-gateway",
        "version": env!("CARGO_PKG_VERSION"),
        "extensions": [],
    }))
}

/// A 200 with `body` as JSON.
fn json(body: &serde_json::Value) -> Response {
    let json = HeaderValue::from_static("application/json");
    ([(header::CONTENT_TYPE, json)], body.to_string()).into_response()
}

/// `GET /v2/models/{name}…`: asked of a backend the probes saw holding
/// the model, or 404 at once when none does (`metadata.rs`).
async fn model_metadata(
    State(app): State<App>,
    params: Result<Path<Vec<(String, String)>>, axum::extract::rejection::PathRejection>,
    req: Request,
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
    super::metadata::answer(&app, &model, req).await
}

/// `GET /v1/models`: the models the fleet serves (the union of what each
/// backend's last probe listed), in OpenAI's list shape.
async fn list_models(State(app): State<App>) -> Response {
    json(&app.catalog.openai_list())
}

/// `GET /v1/models/{model}`: one of the fleet's models, or a 404 in
/// OpenAI's shape.
async fn retrieve_model(State(app): State<App>, Path(model): Path<String>) -> Response {
    match app.catalog.openai_model(&model) {
        Some(entry) => json(&entry),
        None => {
            let mut reply = ErrorReply::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                "model_not_found",
                format!("the model `{model}` does not exist"),
            );
            reply.param = Some("model");
            reply.into_response()
        }
    }
}

/// `GET /version`, `/info`, …: a server's own information, from a backend
/// that serves the fleet's first model (in name order); 503 while the
/// fleet serves none.
async fn server_info(State(app): State<App>, mut req: Request) -> Response {
    let Some((model, _)) = app.catalog.models().into_iter().next() else {
        return no_model_served().into_response();
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
pub fn prometheus() -> Result<PrometheusHandle, BoxError> {
    static HANDLE: Mutex<Option<PrometheusHandle>> = Mutex::new(None);
    let mut slot = HANDLE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(handle) = slot.as_ref() {
        return Ok(handle.clone());
    }
    // TTFT and TPOT as histograms (`_bucket{le=…}`), which Prometheus
    // adds up across replicas, not summaries (quantiles per process).
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full("model_balance_backend_ttft_seconds".into()),
            &tower_model_balance::metrics::TTFT_BUCKETS,
        )?
        .set_buckets_for_metric(
            Matcher::Full("model_balance_backend_tpot_seconds".into()),
            &tower_model_balance::metrics::TPOT_BUCKETS,
        )?
        .install_recorder()?;
    // The `# HELP` lines of every series.
    tower_model_balance::metrics::describe();
    metrics::describe_counter!(
        errors::ERRORS_SERIES,
        "error answers the gateway gave itself, by OpenAI error code"
    );
    metrics::describe_counter!(
        super::unresponsive::CUTS_SERIES,
        "cuts of a backend's requests waiting for their response head, its health probes \
         unanswered while a peer answered, by backend"
    );
    metrics::describe_counter!(
        connection::CLOSED_SERIES,
        "connections the gateway closed itself, by listener and reason: connection_limit \
         (refused at the bound with a 503), idle_for_room (idle, closed to make room), \
         header_timeout (no whole request head within the header timeout)"
    );
    metrics::describe_gauge!(
        connection::OPEN_SERIES,
        "connections open and served, by listener"
    );
    *slot = Some(handle.clone());
    Ok(handle)
}
