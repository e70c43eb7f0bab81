//! One request to a simulated server: the fault in force, the info routes,
//! then inference through the queue and the residency, answered whole or
//! streamed.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::time::Instant;

use super::control;
use super::fault::Fault;
use super::metrics::{self, Snapshot};
use super::openai;
use super::prefill::usage_json;
use super::protocol::{self, BACKEND_HEADER, COLD_LOAD_HEADER, RESIDENT_MODELS_HEADER};
use super::queue::{backlog_delay, Counted};
use super::reply::{json, plain, unavailable, SimResponse};
use super::repository;
use super::residency::Access;
use super::state::{lock, Job, State};
use super::stream::{Plan, Stream};
use super::wire::{CutMidBody, Wire};
use tower_model_balance::route::{ModelId, RequestKind, RouteInfo};

/// The answer to `req`, as it is sent.
pub(super) async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<Wire>, Infallible> {
    let arrived = Instant::now();
    let mut stream = None;
    let mut response = match serve(state, req, &mut stream).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    let served = u64::try_from(arrived.elapsed().as_micros()).unwrap_or(u64::MAX);
    response
        .headers_mut()
        .insert(protocol::SERVED_IN_HEADER, http::HeaderValue::from(served));
    Ok(match stream {
        Some(stream) => response.map(|_| Wire::Stream(stream)),
        None => Wire::of(response),
    })
}

/// The answer to `req`: its status, headers and whole body, or, for a
/// streamed answer, its status and headers with the body's `stream` put
/// in `stream`.
async fn serve(
    state: Arc<State>,
    req: Request<Incoming>,
    stream: &mut Option<Stream>,
) -> Result<SimResponse, Infallible> {
    let seq = state.counters.requests.fetch_add(1, Ordering::Relaxed);
    let fault = *state.fault.borrow();
    if fault == Some(Fault::Hang) {
        return hang(&state, req).await;
    }
    let path = req.uri().path();
    // GET or HEAD, as vLLM answers both (a HEAD's answer goes out
    // without its body).
    if (req.method() == Method::GET || req.method() == Method::HEAD)
        && (path == protocol::READY_PATH || path == protocol::HEALTH_PATH)
    {
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
    if req.method() == Method::GET {
        if let Some((model, ready)) = protocol::parse_model_path(req.uri().path()) {
            return Ok(model_metadata(&state, fault, &model, ready));
        }
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
    let body = body.to_bytes();
    let (slow, backlog) = match fault {
        Some(Fault::Unavailable) => return Ok(unavailable(&state)),
        Some(Fault::Slow { factor, share }) => {
            let draw = xxhash_rust::xxh3::xxh3_64(&seq.to_le_bytes()) as f64 / u64::MAX as f64;
            (if draw < share { factor.max(1) } else { 1 }, 0)
        }
        Some(Fault::Backlog { waiting }) => (1, waiting),
        _ => (1, 0),
    };
    let (model, asked) = match path_model {
        Some(model) => (model, None),
        None => match openai::read(&body) {
            Ok(asked) => (asked.model.clone(), Some(asked)),
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
    // Chat and completions stream when asked to; updates never do.
    let streamed = match (openai, &asked) {
        (Some(route @ (openai::Route::ChatCompletions | openai::Route::Completions)), Some(a))
            if a.stream && kind != RequestKind::Update =>
        {
            Some((route, a.max_tokens.unwrap_or(config.stream_tokens)))
        }
        _ => None,
    };
    // A chat or completion inference: what its prompt is, for the prefix
    // cache and the usage it reports.
    let generates = kind != RequestKind::Update && openai.is_some_and(openai::Route::generates);
    let prompt = generates.then(|| protocol::prompt_text(&body).unwrap_or_default());
    let cached_path = generates && state.prefill.is_some();
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
    let queued = state.counters.waiting.load(Ordering::Relaxed);
    state
        .counters
        .max_waiting
        .fetch_max(queued, Ordering::Relaxed);
    if backlog > 0 {
        // Only then: a zero sleep would still wait for the timer's next tick.
        tokio::time::sleep(backlog_delay(backlog, config.concurrency, service)).await;
    }
    let Ok(slot) = state.slots.clone().acquire_owned().await else {
        return Ok(plain(StatusCode::SERVICE_UNAVAILABLE, "closed"));
    };
    drop(waiting);
    let running = Counted::enter(&state.counters.running);
    // A whole answer waits here for its model and its service time; a
    // streamed one sends its head now, as vLLM does when it accepts a
    // request, and waits for them before its first token (`first_at`).
    let now = Instant::now();
    let mut ready_at = now;
    let cold = if kind == RequestKind::Update || config.explicit_load {
        // Explicit mode: the model was loaded when the request arrived, and
        // an admitted request keeps it (as Triton's requests hold theirs).
        false
    } else {
        let access = lock(&state.residency).access(model.as_str(), now, config.cold_load);
        let cold = match access {
            Access::Warm => false,
            Access::Load { ready_at: at } => {
                state.counters.cold_loads.fetch_add(1, Ordering::Relaxed);
                ready_at = at;
                true
            }
            Access::Loading { ready_at: at } => {
                ready_at = at;
                true
            }
        };
        cold || arrived_loading
    };
    let mut first_at = ready_at.max(now) + service;
    // With the prefix cache, the prefill engine times the first token.
    let mut prefill = None;
    if let (true, Some(text), Some(jobs)) = (cached_path, &prompt, &state.prefill) {
        let (done, prefilled) = tokio::sync::oneshot::channel();
        let job = Job {
            blocks: protocol::prompt_blocks(text).collect(),
            tokens: protocol::prompt_tokens(text),
            ready_at: ready_at.max(now),
            slow,
            done,
            state: state.clone(),
        };
        if jobs.send(job).is_err() {
            return Ok(plain(StatusCode::SERVICE_UNAVAILABLE, "closed"));
        }
        prefill = Some(prefilled);
    }
    let mut usage = None;
    if streamed.is_none() {
        if let Some(prefilled) = prefill.take() {
            let Ok(prefilled) = prefilled.await else {
                return Ok(plain(StatusCode::SERVICE_UNAVAILABLE, "closed"));
            };
            let tokens = asked.as_ref().and_then(|a| a.max_tokens);
            let tokens = tokens.unwrap_or(config.stream_tokens);
            usage = Some(usage_json(prefilled, tokens));
            first_at = Instant::now() + config.decode_time.saturating_mul(tokens);
        }
        tokio::time::sleep_until(first_at).await;
    }
    // As of the answer's first token: a streamed head lists the model it
    // is loading, which is resident by then.
    let as_of = first_at.max(Instant::now());
    let resident = repository::resident_list(&lock(&state.residency), as_of);
    let mut response = match (streamed, openai) {
        (Some(_), _) => {
            let mut head = plain(StatusCode::OK, "");
            head.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/event-stream"),
            );
            head
        }
        (None, Some(route)) => json(
            StatusCode::OK,
            &match &usage {
                Some(usage) => route.response_with_usage(model.as_str(), usage),
                None => route.response(model.as_str()),
            },
        ),
        (None, None) => plain(StatusCode::OK, &protocol::infer_response(model.as_str())),
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
    if let Some((route, tokens)) = streamed {
        let plan = Plan {
            route,
            model: model.as_str().to_owned(),
            seq,
            tokens,
            decode: config.decode_time,
            first_at,
            fault,
            include_usage: asked.as_ref().is_some_and(|a| a.include_usage),
            prompt_tokens: prompt.as_deref().map_or(0, protocol::prompt_tokens),
            prefill,
        };
        // The body holds the slot and the running count from here.
        *stream = Some(Stream::start(state.clone(), slot, running, plan));
    } else if fault == Some(Fault::Reset) {
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

/// `GET /v2/models/{model}` (metadata) or `…/ready`: answered for a model
/// loaded, 404 for any other, as MLServer answers.
fn model_metadata(state: &State, fault: Option<Fault>, model: &str, ready: bool) -> SimResponse {
    if fault == Some(Fault::Unavailable) {
        return unavailable(state);
    }
    let loaded = lock(&state.residency)
        .states(Instant::now())
        .any(|(name, loaded)| loaded && name == model);
    if !loaded {
        let message = format!("Model {model} not found");
        return json(StatusCode::NOT_FOUND, &protocol::kserve_error(&message));
    }
    if ready {
        return plain(StatusCode::OK, "");
    }
    let metadata = serde_json::json!({
        "name": model,
        "versions": ["1"],
        "platform": "sim",
        "inputs": [],
        "outputs": [],
    });
    json(StatusCode::OK, &metadata.to_string())
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
        prefix_queries: c.prompt_tokens.load(Ordering::Relaxed),
        prefix_hits: c.cached_tokens.load(Ordering::Relaxed),
    }
}
