//! Model control through the repository API: KServe v2's load and unload
//! (Triton's explicit model-control mode) and the 404 of a request for a
//! model not loaded; vLLM's LoRA routes are in `lora` (see
//! [`protocol`](super::protocol)).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, StatusCode};
use tokio::time::Instant;

use super::fault::Fault;
use super::loads::{load, Call, Loaded};
use super::lora;
use super::protocol::{self, kserve_error};
use super::reply::{json, plain, unavailable, SimResponse};
use super::state::{lock, Outcome, State};
use tower_model_balance::route::ModelId;

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
                (name, true) => Some(Self::Load(name)),
                (name, false) => Some(Self::Unload(name)),
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
            true => lora::bad_body(),
            false => json(StatusCode::BAD_REQUEST, &kserve_error("unreadable body")),
        };
    };
    match route {
        Route::Load(name) => kserve_load(state, &name, &body).await,
        Route::Unload(name) => kserve_unload(state, &name, &body),
        Route::LoadLora => lora::load(state, &body).await,
        Route::UnloadLora => lora::unload(state, &body).await,
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
