//! Model control through the repository API: KServe v2's load and unload
//! (Triton's explicit model-control mode) and vLLM's LoRA adapter routes,
//! with one load per model at a time (see [`protocol`](super::protocol)).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, StatusCode};
use tokio::sync::watch;
use tokio::time::Instant;

use super::fault::Fault;
use super::protocol::{self, kserve_error, vllm_error};
use super::queue::Counted;
use super::server::{json, lock, plain, unavailable, SimResponse, State};
use crate::route::ModelId;

/// A model-control request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// `POST /v2/repository/models/{name}/load`.
    Load(String),
    /// `POST /v2/repository/models/{name}/unload`.
    Unload(String),
    /// `POST /v1/load_lora_adapter`.
    LoadLora,
    /// `POST /v1/unload_lora_adapter`.
    UnloadLora,
}

impl Route {
    /// The model-control request at `path`, if it is one.
    pub(crate) fn of(method: &Method, path: &str) -> Option<Self> {
        if method != Method::POST {
            return None;
        }
        match path {
            protocol::LOAD_LORA_PATH => Some(Self::LoadLora),
            protocol::UNLOAD_LORA_PATH => Some(Self::UnloadLora),
            _ => match protocol::parse_control_path(path)? {
                (name, true) => Some(Self::Load(name.to_owned())),
                (name, false) => Some(Self::Unload(name.to_owned())),
            },
        }
    }

    fn is_lora(&self) -> bool {
        matches!(self, Self::LoadLora | Self::UnloadLora)
    }

    fn is_load(&self) -> bool {
        matches!(self, Self::Load(_) | Self::LoadLora)
    }
}

/// How a load through the repository API ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The model is ready.
    Loaded,
    /// It failed under [`Fault::LoadFails`].
    Failed,
    /// The model was evicted or unloaded before its load ended.
    Removed,
    /// The server stopped.
    Stopped,
}

impl Outcome {
    fn reason(self) -> &'static str {
        match self {
            Self::Loaded => "loaded",
            Self::Failed => "simulated load failure",
            Self::Removed => "unloaded before its load ended",
            Self::Stopped => "server stopped",
        }
    }
}

/// Loads in progress and load calls in flight, by model.
#[derive(Debug, Default)]
pub(crate) struct Loads {
    /// The outcome of each load in progress, once it ends.
    pending: HashMap<String, watch::Receiver<Option<Outcome>>>,
    /// Load calls in flight, by model.
    calls: HashMap<String, u64>,
    /// The most load calls for one model in flight at once.
    max_calls: u64,
}

impl Loads {
    /// The most load calls for one model in flight at once, ever.
    pub(crate) fn max_calls(&self) -> u64 {
        self.max_calls
    }
}

/// One load call in flight for a model, counted until dropped (a call
/// whose connection closed leaves the count true).
struct Call<'a> {
    state: &'a State,
    model: String,
}

impl<'a> Call<'a> {
    fn enter(state: &'a State, model: &str) -> Self {
        let mut loads = lock(&state.loads);
        let calls = loads.calls.entry(model.to_owned()).or_default();
        *calls += 1;
        let calls = *calls;
        loads.max_calls = loads.max_calls.max(calls);
        drop(loads);
        state.changed.notify_waiters();
        Self {
            state,
            model: model.to_owned(),
        }
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        let mut loads = lock(&self.state.loads);
        if let Some(calls) = loads.calls.get_mut(&self.model) {
            *calls -= 1;
            if *calls == 0 {
                loads.calls.remove(&self.model);
            }
        }
    }
}

/// What a load call found and led to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Loaded {
    /// The model was loaded already: nothing started.
    Already,
    /// This call started the load, which ended so.
    Started(Outcome),
    /// This call waited for a load in progress, which ended so.
    Joined(Outcome),
}

/// Loads `model` (a valid, known model ID) unless it is loaded already or
/// its load is in progress, which the call then waits for.
async fn load(state: &Arc<State>, model: &str) -> Loaded {
    match begin(state, model) {
        Begun::Already => Loaded::Already,
        Begun::Joined(outcome) => Loaded::Joined(wait(outcome).await),
        Begun::Started(outcome) => {
            state.changed.notify_waiters();
            Loaded::Started(wait(outcome).await)
        }
    }
}

/// What [`begin`] found.
enum Begun {
    Already,
    Joined(watch::Receiver<Option<Outcome>>),
    Started(watch::Receiver<Option<Outcome>>),
}

/// Joins the load of `model` in progress, or finds it loaded, or starts
/// its load, all under one lock of the loads.
fn begin(state: &Arc<State>, model: &str) -> Begun {
    let mut loads = lock(&state.loads);
    if let Some(pending) = loads.pending.get(model) {
        return Begun::Joined(pending.clone());
    }
    let mut residency = lock(&state.residency);
    let now = Instant::now();
    if residency.lookup(model, now, true) == Some(true) {
        return Begun::Already;
    }
    // Resident now, `LOADING`: the LRU model makes room at once.
    residency.start_load(model, now);
    drop(residency);
    let (done, outcome) = watch::channel(None);
    loads.pending.insert(model.to_owned(), outcome.clone());
    state.counters.loads_started.fetch_add(1, Ordering::Relaxed);
    state.counters.cold_loads.fetch_add(1, Ordering::Relaxed);
    // Its own task: the load goes on if this call's client hangs up.
    tokio::spawn(run(state.clone(), model.to_owned(), done));
    Begun::Started(outcome)
}

/// The outcome of a load, once it ends.
async fn wait(mut outcome: watch::Receiver<Option<Outcome>>) -> Outcome {
    match outcome.wait_for(Option::is_some).await {
        Ok(ended) => ended.unwrap_or(Outcome::Stopped),
        Err(_) => Outcome::Stopped,
    }
}

/// The load of `model`: a serving slot for the cold-load time, then ready
/// unless a fault says otherwise; ends when the server stops.
async fn run(state: Arc<State>, model: String, done: watch::Sender<Option<Outcome>>) {
    let mut shutdown = state.shutdown.clone();
    let outcome = tokio::select! {
        outcome = loading(&state) => outcome,
        _ = shutdown.wait_for(|&stopped| stopped) => Outcome::Stopped,
    };
    let outcome = {
        let mut loads = lock(&state.loads);
        loads.pending.remove(&model);
        let mut residency = lock(&state.residency);
        match outcome {
            Outcome::Loaded if !residency.finish_load(&model, Instant::now()) => Outcome::Removed,
            Outcome::Loaded => Outcome::Loaded,
            other => {
                residency.abort_load(&model);
                other
            }
        }
    };
    if outcome != Outcome::Loaded {
        state.counters.loads_failed.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(backend = %state.name, model = %model, reason = outcome.reason(), "sim load failed");
    }
    done.send_replace(Some(outcome));
    state.changed.notify_waiters();
}

/// Waits for a serving slot, holds it for the cold-load time, then ends
/// as the fault at that moment says: failed under [`Fault::LoadFails`],
/// not before it is lifted under [`Fault::LoadHangs`].
async fn loading(state: &State) -> Outcome {
    let waiting = Counted::enter(&state.counters.waiting);
    let Ok(_slot) = state.slots.acquire().await else {
        return Outcome::Stopped;
    };
    drop(waiting);
    let _running = Counted::enter(&state.counters.running);
    tokio::time::sleep(state.config.cold_load).await;
    let mut fault = state.fault.subscribe();
    loop {
        let now = *fault.borrow_and_update();
        match now {
            Some(Fault::LoadFails) => return Outcome::Failed,
            Some(Fault::LoadHangs) => {}
            _ => return Outcome::Loaded,
        }
        if fault.changed().await.is_err() {
            return Outcome::Stopped;
        }
    }
}

/// The 404 body for an inference request for `model` when the server
/// cannot serve it without a load: not in the repository, or (explicit
/// mode) not loaded. `None`: serve it. A loaded model counts as used.
pub(crate) fn not_found(state: &State, model: &str) -> Option<String> {
    let not_found = || {
        kserve_error(&format!(
            "Request for unknown model: '{model}' is not found"
        ))
    };
    if !state.config.knows(model) {
        return Some(not_found());
    }
    if !state.config.explicit_load {
        return None;
    }
    let mut residency = lock(&state.residency);
    match residency.lookup(model, Instant::now(), true) {
        Some(true) => None,
        Some(false) => Some(no_versions(model)),
        None if residency.evicted().any(|m| m == model) => Some(no_versions(model)),
        None => Some(not_found()),
    }
}

fn no_versions(model: &str) -> String {
    kserve_error(&format!(
        "Request for unknown model: '{model}' has no available versions"
    ))
}

/// Whether an index request body asks for ready models only
/// (`{"ready": true}`); any other body asks for all.
pub(crate) fn asks_ready_only(body: &Bytes) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("ready").and_then(serde_json::Value::as_bool))
        .unwrap_or(false)
}

/// Answers a model-control request whose body was read (`None`: it could
/// not be).
pub(crate) async fn serve(state: &Arc<State>, route: Route, body: Option<Bytes>) -> SimResponse {
    if route.is_load() {
        state.counters.load_calls.fetch_add(1, Ordering::Relaxed);
    }
    if !state.config.explicit_load {
        return if route.is_lora() {
            plain(StatusCode::NOT_FOUND, "not found")
        } else {
            json(
                StatusCode::SERVICE_UNAVAILABLE,
                &kserve_error("explicit model load / unload is not allowed if polling is enabled"),
            )
        };
    }
    if *state.fault.borrow() == Some(Fault::Unavailable) {
        return unavailable(state);
    }
    let Some(body) = body else {
        return match route.is_lora() {
            true => lora_error(
                StatusCode::BAD_REQUEST,
                "unreadable body",
                "BadRequestError",
            ),
            false => json(StatusCode::BAD_REQUEST, &kserve_error("unreadable body")),
        };
    };
    match route {
        Route::Load(name) => kserve_load(state, &name, &body).await,
        Route::Unload(name) => kserve_unload(state, &name, &body),
        Route::LoadLora => lora_load(state, &body).await,
        Route::UnloadLora => lora_unload(state, &body).await,
    }
}

/// Whether a KServe v2 load or unload body is valid: empty, or a JSON
/// object.
fn kserve_body(body: &Bytes) -> bool {
    body.is_empty()
        || matches!(
            serde_json::from_slice::<serde_json::Value>(body),
            Ok(serde_json::Value::Object(_))
        )
}

/// Triton's answer to a body that is not JSON.
fn kserve_bad_body() -> SimResponse {
    json(
        StatusCode::BAD_REQUEST,
        &kserve_error("failed to parse the request JSON buffer"),
    )
}

async fn kserve_load(state: &Arc<State>, name: &str, body: &Bytes) -> SimResponse {
    if !kserve_body(body) {
        return kserve_bad_body();
    }
    let model = match ModelId::new(name) {
        Ok(model) => model,
        Err(error) => return json(StatusCode::BAD_REQUEST, &kserve_error(&error.to_string())),
    };
    let model = model.as_str();
    let _call = Call::enter(state, model);
    if !state.config.knows(model) {
        let message = format!("failed to load '{model}', failed to poll from model repository");
        return json(StatusCode::NOT_FOUND, &kserve_error(&message));
    }
    match load(state, model).await {
        Loaded::Already | Loaded::Started(Outcome::Loaded) | Loaded::Joined(Outcome::Loaded) => {
            json(StatusCode::OK, "")
        }
        Loaded::Started(Outcome::Stopped) | Loaded::Joined(Outcome::Stopped) => {
            plain(StatusCode::SERVICE_UNAVAILABLE, "closed")
        }
        Loaded::Started(failed) | Loaded::Joined(failed) => {
            let message = format!("load failed for model '{model}': {}", failed.reason());
            json(StatusCode::BAD_REQUEST, &kserve_error(&message))
        }
    }
}

fn kserve_unload(state: &State, name: &str, body: &Bytes) -> SimResponse {
    if !kserve_body(body) {
        return kserve_bad_body();
    }
    let model = match ModelId::new(name) {
        Ok(model) => model,
        Err(error) => return json(StatusCode::BAD_REQUEST, &kserve_error(&error.to_string())),
    };
    // Loaded or loading (Triton aborts a load in progress): removed. Not
    // resident: nothing to do, and Triton answers 200 too.
    if lock(&state.residency).remove(model.as_str()) {
        state.counters.unloads.fetch_add(1, Ordering::Relaxed);
    }
    json(StatusCode::OK, "")
}

/// A vLLM error response.
fn lora_error(status: StatusCode, message: &str, kind: &str) -> SimResponse {
    json(status, &vllm_error(message, kind, status.as_u16()))
}

/// The non-empty string field `field` of a JSON object body.
fn string_field<'a>(body: &'a serde_json::Value, field: &str) -> Option<&'a str> {
    body.get(field)
        .and_then(serde_json::Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The body as a JSON object, if it is one.
fn lora_body(body: &Bytes) -> Option<serde_json::Value> {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .filter(serde_json::Value::is_object)
}

/// vLLM's answer to a body that is not a JSON object.
fn lora_bad_body() -> SimResponse {
    lora_error(
        StatusCode::BAD_REQUEST,
        "the request body is not a JSON object",
        "BadRequestError",
    )
}

fn success(message: String) -> SimResponse {
    let mut response = plain(StatusCode::OK, &message);
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

async fn lora_load(state: &Arc<State>, body: &Bytes) -> SimResponse {
    let Some(body) = lora_body(body) else {
        return lora_bad_body();
    };
    let (Some(name), Some(path)) = (
        string_field(&body, "lora_name"),
        string_field(&body, "lora_path"),
    ) else {
        return lora_error(
            StatusCode::BAD_REQUEST,
            "Both 'lora_name' and 'lora_path' must be provided.",
            "InvalidUserInput",
        );
    };
    let model = match ModelId::new(name) {
        Ok(model) => model,
        Err(error) => {
            return lora_error(
                StatusCode::BAD_REQUEST,
                &error.to_string(),
                "BadRequestError",
            )
        }
    };
    let model = model.as_str();
    let _call = Call::enter(state, model);
    if !state.config.knows(model) {
        let message = format!("Loading lora {model} failed: No adapter found for {path}");
        return lora_error(StatusCode::NOT_FOUND, &message, "NotFoundError");
    }
    let already = || {
        lora_error(
            StatusCode::BAD_REQUEST,
            &format!("The lora adapter '{model}' has already been loaded."),
            "InvalidUserInput",
        )
    };
    match load(state, model).await {
        Loaded::Started(Outcome::Loaded) => success(format!(
            "Success: LoRA adapter '{model}' added successfully."
        )),
        // vLLM checks under a per-adapter lock: a call that waited for a
        // load finds the adapter loaded.
        Loaded::Already | Loaded::Joined(Outcome::Loaded) => already(),
        Loaded::Started(Outcome::Stopped) | Loaded::Joined(Outcome::Stopped) => {
            plain(StatusCode::SERVICE_UNAVAILABLE, "closed")
        }
        Loaded::Started(failed) | Loaded::Joined(failed) => {
            let message = format!("Loading lora {model} failed: {}", failed.reason());
            lora_error(StatusCode::BAD_REQUEST, &message, "BadRequestError")
        }
    }
}

async fn lora_unload(state: &Arc<State>, body: &Bytes) -> SimResponse {
    let Some(body) = lora_body(body) else {
        return lora_bad_body();
    };
    let Some(name) = string_field(&body, "lora_name") else {
        return lora_error(
            StatusCode::BAD_REQUEST,
            "'lora_name' needs to be provided to unload a LoRA adapter.",
            "InvalidUserInput",
        );
    };
    // vLLM's per-adapter lock: an unload waits for a load in progress.
    let pending = lock(&state.loads).pending.get(name).cloned();
    if let Some(outcome) = pending {
        wait(outcome).await;
    }
    if lock(&state.residency).remove(name) {
        state.counters.unloads.fetch_add(1, Ordering::Relaxed);
        return success(format!(
            "Success: LoRA adapter '{name}' removed successfully."
        ));
    }
    lora_error(
        StatusCode::NOT_FOUND,
        &format!("The lora adapter '{name}' cannot be found."),
        "NotFoundError",
    )
}
