//! The OpenAI-compatible inference routes, as vLLM serves them: the model
//! is named in the JSON body, not in the path. Served as a KServe v2
//! inference of that model is (same queue, residency and faults); only the
//! response body and the error bodies differ (see [`protocol`]).

use http::StatusCode;

use super::config::MAX_STREAM_TOKENS;
use super::protocol::{self, vllm_error};
use super::reply::{json, SimResponse};
use tower_model_balance::route::ModelId;

/// One of the OpenAI-compatible inference routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    /// `POST /v1/chat/completions`.
    ChatCompletions,
    /// `POST /v1/completions`.
    Completions,
    /// `POST /v1/embeddings`.
    Embeddings,
    /// `POST /v1/responses`: one answer, never a stream.
    Responses,
}

impl Route {
    /// The route `path` names, if it is one.
    pub(super) fn of(path: &str) -> Option<Self> {
        match path {
            protocol::CHAT_COMPLETIONS_PATH => Some(Self::ChatCompletions),
            protocol::COMPLETIONS_PATH => Some(Self::Completions),
            protocol::EMBEDDINGS_PATH => Some(Self::Embeddings),
            protocol::RESPONSES_PATH => Some(Self::Responses),
            _ => None,
        }
    }

    /// The body of a successful answer for `model`.
    pub(super) fn response(self, model: &str) -> String {
        match self {
            Self::ChatCompletions => protocol::chat_completion_response(model),
            Self::Completions => protocol::completion_response(model),
            Self::Embeddings => protocol::embedding_response(model),
            Self::Responses => response_object(model),
        }
    }

    /// The body of a successful chat or completion answer for `model`
    /// reporting `usage` (a JSON object); embeddings and responses as
    /// [`response`](Self::response).
    pub(super) fn response_with_usage(self, model: &str, usage: &str) -> String {
        match self {
            Self::ChatCompletions => protocol::chat_completion_with_usage(model, usage),
            Self::Completions => protocol::completion_with_usage(model, usage),
            Self::Embeddings | Self::Responses => self.response(model),
        }
    }

    /// Chat completions or completions: a route that generates tokens (a
    /// prompt read for the prefix cache, usage reported, a stream when
    /// asked).
    pub(super) fn generates(self) -> bool {
        matches!(self, Self::ChatCompletions | Self::Completions)
    }
}

/// A Responses API answer for `model` (`"object": "response"`), one
/// output message.
fn response_object(model: &str) -> String {
    serde_json::json!({
        "id": "resp_sim",
        "object": "response",
        "status": "completed",
        "model": model,
        "output": [{
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "simulated"}],
        }],
    })
    .to_string()
}

/// Why a request body names no model the server could serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum BadModel {
    /// The body is not a JSON object with a string `"model"`.
    NotNamed,
    /// The named model is not a valid model ID.
    Invalid(String),
}

impl BadModel {
    /// The answer: 400 for a body naming no model; 404 for an invalid
    /// model ID, as vLLM answers a model it does not serve.
    pub(super) fn response(&self) -> SimResponse {
        match self {
            Self::NotNamed => {
                let message = "the body must be a JSON object with a string `model`";
                json(
                    StatusCode::BAD_REQUEST,
                    &vllm_error(message, "BadRequestError", 400),
                )
            }
            Self::Invalid(name) => not_found(name),
        }
    }
}

/// What the simulation reads of an OpenAI-style request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Asked {
    /// Its top-level `"model"` string.
    pub(super) model: ModelId,
    /// `"stream": true`.
    pub(super) stream: bool,
    /// Its `"max_tokens"`, when a number: rounded down, clamped to
    /// 1 ..= 4 096.
    pub(super) max_tokens: Option<u32>,
    /// `"stream_options": {"include_usage": true}`.
    pub(super) include_usage: bool,
}

/// Reads a request body: the model it names (its top-level `"model"`
/// string), whether it asks for a stream and its `max_tokens`.
pub(super) fn read(body: &[u8]) -> Result<Asked, BadModel> {
    let value: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let Some(name) = value.as_ref().and_then(|v| v.get("model")?.as_str()) else {
        return Err(BadModel::NotNamed);
    };
    let model = ModelId::new(name).map_err(|_| BadModel::Invalid(name.to_owned()))?;
    let field = |key: &str| value.as_ref().and_then(|v| v.get(key));
    let max_tokens = field("max_tokens").and_then(|n| {
        // `as` saturates: a huge float is clamped below, a negative one is 0.
        let n = n.as_u64().or_else(|| n.as_f64().map(|f| f as u64))?;
        Some(n.clamp(1, u64::from(MAX_STREAM_TOKENS)) as u32)
    });
    let include_usage =
        field("stream_options").and_then(|o| o.get("include_usage")?.as_bool()) == Some(true);
    Ok(Asked {
        model,
        stream: field("stream").and_then(serde_json::Value::as_bool) == Some(true),
        max_tokens,
        include_usage,
    })
}

/// vLLM's answer for a model it does not serve.
pub(super) fn not_found(model: &str) -> SimResponse {
    let message = format!("The model `{model}` does not exist.");
    json(
        StatusCode::NOT_FOUND,
        &vllm_error(&message, "NotFoundError", 404),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_by_path() {
        assert_eq!(
            Route::of("/v1/chat/completions"),
            Some(Route::ChatCompletions)
        );
        assert_eq!(Route::of("/v1/completions"), Some(Route::Completions));
        assert_eq!(Route::of("/v1/embeddings"), Some(Route::Embeddings));
        assert_eq!(Route::of("/v1/responses"), Some(Route::Responses));
        assert_eq!(Route::of("/v1/models"), None);
        assert_eq!(Route::of("/v1/chat/completions/"), None);
    }

    #[test]
    fn the_model_comes_from_the_body() {
        let asked = read(br#"{"messages": [], "model": "llama-3-8b"}"#).unwrap();
        assert_eq!(asked.model.as_str(), "llama-3-8b");
        assert_eq!((asked.stream, asked.max_tokens), (false, None));
        for bad in [&b"not json"[..], b"[]", b"{}", br#"{"model": 7}"#] {
            let err = read(bad).unwrap_err();
            assert_eq!(err, BadModel::NotNamed);
            assert_eq!(err.response().status(), 400);
        }
        for unknown in ["", "a b"] {
            let body = format!(r#"{{"model": "{unknown}"}}"#);
            let err = read(body.as_bytes()).unwrap_err();
            assert_eq!(err, BadModel::Invalid(unknown.to_owned()));
            assert_eq!(err.response().status(), 404);
        }
    }

    #[test]
    fn stream_and_max_tokens() {
        let asked = |body: &str| {
            let a = read(body.as_bytes()).unwrap();
            (a.stream, a.max_tokens)
        };
        assert_eq!(
            asked(r#"{"model": "m", "stream": true, "max_tokens": 8}"#),
            (true, Some(8))
        );
        assert_eq!(asked(r#"{"model": "m", "stream": "yes"}"#), (false, None));
        assert_eq!(asked(r#"{"model": "m", "stream": false}"#), (false, None));
        for (tokens, clamped) in [
            ("0", 1),
            ("-3", 1),
            ("2.5", 2),
            ("99999", 4096),
            ("1e30", 4096),
        ] {
            let body = format!(r#"{{"model": "m", "max_tokens": {tokens}}}"#);
            assert_eq!(asked(&body), (false, Some(clamped)), "{tokens}");
        }
        assert_eq!(asked(r#"{"model": "m", "max_tokens": "8"}"#), (false, None));
        let usage = |body: &str| read(body.as_bytes()).unwrap().include_usage;
        assert!(usage(
            r#"{"model": "m", "stream_options": {"include_usage": true}}"#
        ));
        assert!(!usage(
            r#"{"model": "m", "stream_options": {"include_usage": 1}}"#
        ));
        assert!(!usage(r#"{"model": "m"}"#));
    }
}
