//! vLLM's LoRA adapter routes, `POST /v1/load_lora_adapter` and
//! `POST /v1/unload_lora_adapter`, answered as vLLM answers them (see
//! [`protocol`](super::protocol)).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use http::StatusCode;

use super::loads::{self, wait, Call, Loaded};
use super::protocol::vllm_error;
use super::reply::{json, plain, SimResponse};
use super::state::{lock, Outcome, State};
use tower_model_balance::route::ModelId;

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
pub(super) fn bad_body() -> SimResponse {
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

pub(super) async fn load(state: &Arc<State>, body: &Bytes) -> SimResponse {
    let Some(body) = lora_body(body) else {
        return bad_body();
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
    match loads::load(state, model).await {
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

pub(super) async fn unload(state: &Arc<State>, body: &Bytes) -> SimResponse {
    let Some(body) = lora_body(body) else {
        return bad_body();
    };
    let Some(name) = string_field(&body, "lora_name") else {
        return lora_error(
            StatusCode::BAD_REQUEST,
            "'lora_name' needs to be provided to unload a LoRA adapter.",
            "InvalidUserInput",
        );
    };
    // vLLM's per-adapter lock: an unload waits for a load in progress.
    let pending = lock(&state.loads).pending(name);
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
