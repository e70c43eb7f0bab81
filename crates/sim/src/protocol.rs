//! The simulated model server's wire protocol, written down once.
//!
//! ```
//! use tower_model_balance_sim::protocol;
//!
//! let path = protocol::infer_path("resnet-50");
//! assert_eq!(path, "/v2/models/resnet-50/infer");
//! // Names are percent-encoded in the path.
//! assert_eq!(protocol::infer_path("org/m"), "/v2/models/org%2Fm/infer");
//! assert_eq!(protocol::BACKEND_HEADER, "x-sim-backend");
//! ```
//!
//! A subset of the KServe Open Inference Protocol v2 (as served by Triton and
//! KServe model servers), Triton's model repository index, the
//! OpenAI-compatible inference routes and model list (as vLLM serves
//! them) and Prometheus metrics in both vLLM's and
//! Triton's names, plus response headers that report what the simulation
//! did:
//!
//! | request | response |
//! | --- | --- |
//! | `GET` or `HEAD /v2/health/ready` | 200 when serving, 503 while a fault makes the server unavailable |
//! | `GET` or `HEAD /health` (vLLM's health route) | 200 with an empty body when serving, 503 while unavailable, as `/v2/health/ready` |
//! | `POST /v2/models/{name}/infer`, `POST /v2/models/{name}/versions/{version}/infer` (the name percent-decoded; any JSON body, read whole; every version is the one model) | 200 with a v2 inference response; 503 while unavailable; 400 for an unreadable body or invalid model name; 404 with a KServe error body when the model is not in the [repository](super::ServerConfigBuilder::repository) or, in the [explicit mode](super::ServerConfigBuilder::explicit_load), not loaded (see below) |
//! | `POST /v1/chat/completions`, `POST /v1/completions`, `POST /v1/embeddings`, `POST /v1/responses` (OpenAI-compatible, as vLLM serves them; a JSON object body, read whole, naming the model in its top-level `"model"` string) | 200 with an OpenAI-shaped body (`"object": "chat.completion"`, `"text_completion"`, `"list"` or `"response"`) — with `"stream": true` (chat and completions) a stream of server-sent events, see [Streaming](#streaming) — served as a KServe v2 inference of that model is; 503 while unavailable; 400 with a vLLM error body (`BadRequestError`) for a body that is not such an object; 404 with a vLLM error body (`NotFoundError`, ``The model `{name}` does not exist.``) for an invalid model ID and where the KServe v2 route answers 404 |
//! | `POST /v2/repository/index` (any body, read whole; `{"ready": true}` asks for ready models only) | 200 with a JSON array, see below; 503 while unavailable |
//! | `POST /v2/repository/models/{name}/load` (explicit mode; body empty or JSON; `{name}` percent-decoded, as [`load_path`] encodes it) | 200 with an empty body once the model is loaded, see below |
//! | `POST /v2/repository/models/{name}/unload` (explicit mode; body empty or JSON) | 200 with an empty body; the model, loaded or loading, is removed (a model not resident: 200 too, as Triton answers) |
//! | `POST /v1/load_lora_adapter` (explicit mode; `{"lora_name", "lora_path"}`) | 200 `Success: LoRA adapter '{name}' added successfully.` (text), see below |
//! | `POST /v1/unload_lora_adapter` (explicit mode; `{"lora_name"}`) | 200 `Success: LoRA adapter '{name}' removed successfully.` (text); 404 `NotFoundError` when the adapter is not loaded; waits for a load of it in progress first |
//! | `GET /v2/models/{name}`, `GET /v2/models/{name}/ready` (and their `/versions/{version}` forms; the name percent-decoded) | for a model loaded (not loading): 200 with KServe v2 model metadata `{"name", "versions": ["1"], "platform": "sim", "inputs": [], "outputs": []}`, or for readiness 200 with an empty body; else 404 with a KServe error body; 503 while unavailable |
//! | `GET /v1/models` | 200 with an OpenAI model list `{"object": "list", "data": [{"id", "object": "model", "created": 0, "owned_by": "sim"}]}` of the loaded models (not those loading); 503 while unavailable |
//! | `GET /metrics` | 200 with Prometheus text (see below); 503 while unavailable |
//! | anything else | 404 |
//!
//! The repository index lists, without a repository list, each resident
//! model `{"name", "version": "1", "state": "READY", "reason": ""}`
//! (`"LOADING"` while its load is in progress), then each model evicted
//! or unloaded since and not resident again, most recent first, at most
//! 32, with
//! `"state": "UNAVAILABLE", "reason": "unloaded"`. With a repository list
//! it lists exactly the repository's models, sorted by name, as Triton
//! does: resident ones `READY` or `LOADING`, evicted or unloaded ones
//! `UNAVAILABLE`, and those never loaded (or forgotten) as `{"name"}`
//! alone.
//!
//! **Explicit mode.** An inference request for a model not loaded (or
//! still loading) is answered 404 at once, without a load, without a
//! serving slot, counted in [`ServerStats::not_found`](super::ServerStats):
//! `{"error": "Request for unknown model: '{name}' has no available
//! versions"}` for a model loading or unloaded, `… '{name}' is not found`
//! for one never loaded (Triton's texts; Triton answers the latter 400).
//! A load (through either route) of a model neither loaded nor loading
//! starts one: the model is resident at once, `LOADING` (the LRU model
//! evicted if every slot is taken), the load waits for a serving slot and
//! holds it for the cold-load time, as a cold load does in the auto-load
//! mode, then the model is `READY`. Load calls for a model whose load is
//! in progress wait for that load (one load per model at a time, as
//! Triton and vLLM do). The load routes answer:
//!
//! | case | `…/{name}/load` (Triton) | `/v1/load_lora_adapter` (vLLM) |
//! | --- | --- | --- |
//! | loaded by this call | 200, empty body | 200 `Success: …` |
//! | already loaded | 200 at once | 400 `InvalidUserInput` `The lora adapter '{name}' has already been loaded.` |
//! | joined a load in progress that succeeded | 200 | 400, already loaded (vLLM's per-adapter lock) |
//! | the load failed ([`Fault::LoadFails`](super::Fault::LoadFails), or the model was evicted or unloaded before it ended) | 400 `{"error": "load failed for model '{name}': …"}` | 400 `BadRequestError` `Loading lora {name} failed: …` |
//! | model not in the repository | 404 `{"error": "failed to load '{name}', failed to poll from model repository"}` (MLServer's status; Triton answers 500) | 404 `NotFoundError` `Loading lora {name} failed: No adapter found for {path}` |
//! | unreadable or invalid body, invalid model name | 400 | 400 `InvalidUserInput` / `BadRequestError` |
//! | while unavailable | 503 | 503 |
//! | auto-load mode | 503 `{"error": "explicit model load / unload is not allowed if polling is enabled"}` (Triton's answer outside explicit mode) | 404 (vLLM without runtime LoRA updating) |
//!
//! vLLM's error bodies are `{"error": {"message", "type", "param": null,
//! "code"}}`; KServe v2's are `{"error": "…"}`. A load call's client that hangs up does not stop
//! the load. [`Fault::Unavailable`](super::Fault::Unavailable) answers
//! model-control calls 503 too; [`Fault::Slow`](super::Fault::Slow) and
//! [`Fault::Backlog`](super::Fault::Backlog) do not touch loads (as they
//! do not touch cold loads in the auto-load mode);
//! [`Fault::LoadFails`](super::Fault::LoadFails) and
//! [`Fault::LoadHangs`](super::Fault::LoadHangs) make loads fail or hang.
//! Under [`Fault::Hang`](super::Fault::Hang) no request on any path is
//! answered; under [`Fault::Reset`](super::Fault::Reset) each 200 answer
//! to an inference or update stops half-way through its body and the
//! connection is closed.
//!
//! # Streaming
//!
//! A chat or completion request whose body has `"stream": true` is
//! answered as vLLM streams: as soon as the request has its serving slot,
//! `200` with `content-type: text/event-stream` and the headers below;
//! then, after any cold load and its prefill (the service time of a whole
//! answer), one body frame per server-sent event, each written when
//! produced:
//!
//! ```text
//! data: {"id":"chatcmpl-sim-7","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":null}]}
//!
//! data: [DONE]
//!
//! ```
//!
//! (`"object":"text_completion"` with `"text":"tok "` in place of
//! `"delta"` on `/v1/completions`.) The first token event comes after the
//! prefill (the head's cold-load header already says whether a load
//! precedes it), each next one a [decode time](super::ServerConfigBuilder::decode_time)
//! later; the last of them has `"finish_reason":"length"` and is followed
//! at once by `data: [DONE]`. The number of tokens is the body's
//! `max_tokens` (an integer, clamped to 1 ..= 4 096), else
//! [`stream_tokens`](super::ServerConfigBuilder::stream_tokens). The
//! answer holds its serving slot (and counts as running) until its body
//! ends or the client drops it; see [`ServerStats`](super::ServerStats)'s
//! `streams…` and `tokens_sent`. Embeddings, the KServe v2 route and
//! updates are never streamed. [`Fault::SlowDecode`](super::Fault::SlowDecode),
//! [`Fault::StreamError`](super::Fault::StreamError) and
//! [`Fault::StreamCut`](super::Fault::StreamCut) act on streams only;
//! under [`Fault::Reset`](super::Fault::Reset) a stream is cut after half
//! its token events.
//!
//! # Lists and headers
//!
//! Lists are sorted by model name, except the evicted models. An inference
//! request (on any inference route) with header `x-request-kind: update`
//! is served as an update: a fixed time, no resident model needed. Every
//! 200 response to an inference or update carries [`COLD_LOAD_HEADER`], [`BACKEND_HEADER`] and
//! [`RESIDENT_MODELS_HEADER`]; every answer, [`SERVED_IN_HEADER`].
//!
//! The metrics, each a gauge with `# HELP` and `# TYPE` lines:
//!
//! | metric | value |
//! | --- | --- |
//! | `vllm:num_requests_running{engine="0"}` | requests holding a serving slot (loading their model or being served) |
//! | `vllm:num_requests_waiting{engine="0"}` | requests waiting for a serving slot, plus the phantom requests of a [`Fault::Backlog`](super::Fault::Backlog) |
//! | `vllm:kv_cache_usage_perc{engine="0"}` | running ÷ `concurrency`, a fraction in [0, 1] |
//! | `nv_gpu_memory_used_bytes{gpu_uuid="GPU-…"}` | resident models (loaded or loading) × `model_memory` |
//! | `nv_gpu_memory_total_bytes{gpu_uuid="GPU-…"}` | `resident_slots` × `model_memory` |
//!
//! One simulated GPU, its UUID derived from the server's name. The
//! counters `vllm:prefix_cache_queries_total{engine="0"}` and
//! `vllm:prefix_cache_hits_total{engine="0"}` (`# TYPE … counter`) are
//! the prompt tokens prefilled and, of those, found in the prefix cache
//! (0 with the cache off).
//!
//! # Prefix caching
//!
//! With [`prefix_cache`](super::ServerConfigBuilder::prefix_cache) on, a
//! chat or completion inference's prompt ([`prompt_text`]) is cut into
//! blocks ([`prompt_blocks`]); its leading blocks found in the server's
//! cache are not prefilled again, the rest are, one request at a time per
//! server at [`prefill_rate`](super::ServerConfigBuilder::prefill_rate).
//! A whole answer's `usage` is then `{"prompt_tokens", "completion_tokens",
//! "total_tokens", "prompt_tokens_details": {"cached_tokens"}}`, with
//! `completion_tokens` its `max_tokens` (else `stream_tokens`); without
//! the cache it is a fixed `{"prompt_tokens":4,"completion_tokens":3,"total_tokens":7}`.
//! A stream whose request has `"stream_options": {"include_usage": true}`
//! sends, after its last token event and in the frame of `data: [DONE]`,
//! a chunk `{"id", "object", "created", "model", "choices": [], "usage"}`
//! (as OpenAI and vLLM do), its `cached_tokens` 0 without the cache. A
//! body with no prompt (no `messages` or `prompt`, a content that is not
//! text) is served as today, as a prompt of 0 tokens.

use http::HeaderName;

pub use super::prompt::{
    prompt_blocks, prompt_text, prompt_tokens, BLOCK_BYTES, BLOCK_TOKENS, TOKEN_BYTES,
};

/// Response header: `true` when the request waited for its model to load
/// (a cold load), `false` when the model was resident.
pub const COLD_LOAD_HEADER: HeaderName = HeaderName::from_static("x-sim-cold-load");
/// Response header: the name of the simulated backend that served the
/// request.
pub const BACKEND_HEADER: HeaderName = HeaderName::from_static("x-sim-backend");
/// Response header: the models resident and ready (not those still
/// loading) once the request was served, sorted and comma-separated (a
/// name holding a comma reads as two).
pub const RESIDENT_MODELS_HEADER: HeaderName = HeaderName::from_static("x-sim-resident-models");
/// Response header: the microseconds from the request's arrival (its
/// head read) to its answer's head, on the server's clock: what a client's
/// latency less this took outside the server (the network, a proxy).
pub const SERVED_IN_HEADER: HeaderName = HeaderName::from_static("x-sim-served-us");
/// Readiness path.
pub const READY_PATH: &str = "/v2/health/ready";
/// vLLM's health path (GET or HEAD): answered as [`READY_PATH`] is.
pub const HEALTH_PATH: &str = "/health";
/// Triton's model repository index path (POST).
pub const REPOSITORY_INDEX_PATH: &str = "/v2/repository/index";
/// The OpenAI model list path.
pub const MODELS_PATH: &str = "/v1/models";
/// The Prometheus metrics path.
pub(crate) const METRICS_PATH: &str = "/metrics";
/// The OpenAI-compatible chat completions path (POST).
pub const CHAT_COMPLETIONS_PATH: &str = "/v1/chat/completions";
/// The OpenAI-compatible (legacy) completions path (POST).
pub const COMPLETIONS_PATH: &str = "/v1/completions";
/// The OpenAI-compatible embeddings path (POST).
pub const EMBEDDINGS_PATH: &str = "/v1/embeddings";
/// OpenAI's Responses API path (POST): answered at once, never streamed.
pub const RESPONSES_PATH: &str = "/v1/responses";
/// vLLM's path to load a LoRA adapter (POST).
pub const LOAD_LORA_PATH: &str = "/v1/load_lora_adapter";
/// vLLM's path to unload a LoRA adapter (POST).
pub const UNLOAD_LORA_PATH: &str = "/v1/unload_lora_adapter";

/// The KServe v2 repository path that loads `model` (POST), the name
/// percent-encoded (every byte but `A-Z a-z 0-9 - . _ ~`).
pub fn load_path(model: &str) -> String {
    format!("/v2/repository/models/{}/load", encode_segment(model))
}

/// The KServe v2 repository path that unloads `model` (POST), the name
/// percent-encoded as in [`load_path`].
pub fn unload_path(model: &str) -> String {
    format!("/v2/repository/models/{}/unload", encode_segment(model))
}

/// The model name (percent-decoded) and whether it is a load (`true`) or
/// an unload of a KServe v2 repository path, if `path` is one with a
/// valid encoding.
pub(crate) fn parse_control_path(path: &str) -> Option<(String, bool)> {
    let rest = path.strip_prefix("/v2/repository/models/")?;
    let (name, load) = match rest.rsplit_once('/')? {
        (name, "load") => (name, true),
        (name, "unload") => (name, false),
        _ => return None,
    };
    if name.is_empty() || name.contains('/') {
        return None;
    }
    Some((decode_segment(name)?, load))
}

/// The model a KServe v2 metadata or readiness path names
/// (`/v2/models/{name}`, `…/ready`, and their `/versions/{version}` forms;
/// the name percent-decoded), and whether it asks readiness; `None` for
/// any other path.
pub(crate) fn parse_model_path(path: &str) -> Option<(String, bool)> {
    let rest = path.strip_prefix("/v2/models/")?;
    let (rest, ready) = match rest.strip_suffix("/ready") {
        Some(rest) => (rest, true),
        None => (rest, false),
    };
    Some((model_segment(rest)?, ready))
}

/// The model of `{name}` or `{name}/versions/{version}` (a path's part
/// after `/v2/models/`), percent-decoded.
fn model_segment(rest: &str) -> Option<String> {
    let name = match rest.split_once("/versions/") {
        Some((name, version)) if !version.is_empty() && !version.contains('/') => name,
        Some(_) => return None,
        None => rest,
    };
    if name.is_empty() || name.contains('/') {
        return None;
    }
    decode_segment(name)
}

/// `text` with every byte but `A-Z a-z 0-9 - . _ ~` percent-encoded.
fn encode_segment(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for &byte in text.as_bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// A percent-encoded path segment decoded; `None` for a bad escape or
/// bytes that are not UTF-8.
fn decode_segment(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            decoded.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(decoded).ok()
}

/// A KServe v2 error body, `{"error": message}`.
pub(crate) fn kserve_error(message: &str) -> String {
    format!(r#"{{"error":"{}"}}"#, json_escape(message))
}

/// A vLLM (OpenAI-style) error body: `{"error": {"message", "type",
/// "param": null, "code"}}`, `code` the HTTP status.
pub(crate) fn vllm_error(message: &str, kind: &str, code: u16) -> String {
    format!(
        r#"{{"error":{{"message":"{}","type":"{}","param":null,"code":{code}}}}}"#,
        json_escape(message),
        json_escape(kind)
    )
}

/// The inference path for `model`, the name percent-encoded as in
/// [`load_path`].
pub fn infer_path(model: &str) -> String {
    format!("/v2/models/{}/infer", encode_segment(model))
}

/// The model name of an inference path, `/v2/models/{name}/infer` or
/// `/v2/models/{name}/versions/{version}/infer`, percent-decoded (`a%2Fb`
/// is `a/b`, as the balancer's route layer reads it); `None` if `path` is
/// not one, or its name is not validly encoded UTF-8.
pub(crate) fn parse_infer_path(path: &str) -> Option<String> {
    model_segment(path.strip_prefix("/v2/models/")?.strip_suffix("/infer")?)
}

/// A KServe v2 inference response body for `model`, valid JSON whatever
/// the name holds.
pub fn infer_response(model: &str) -> String {
    let name = json_escape(model);
    format!(
        r#"{{"model_name":"{name}","outputs":[{{"name":"output0","datatype":"FP32","shape":[1],"data":[0.5]}}]}}"#
    )
}

/// The text every simulated completion answers.
pub const COMPLETION_TEXT: &str = "Simulated reply.";

/// An OpenAI chat completion body for `model` (`"object":
/// "chat.completion"`): one assistant message, [`COMPLETION_TEXT`], and a
/// fixed token usage; valid JSON whatever the name holds.
pub(crate) fn chat_completion_response(model: &str) -> String {
    chat_completion_with_usage(model, USAGE)
}

/// [`chat_completion_response`] with `usage` (a JSON object) as its usage.
pub(crate) fn chat_completion_with_usage(model: &str, usage: &str) -> String {
    format!(
        r#"{{"id":"chatcmpl-sim","object":"chat.completion","created":0,"model":"{}","choices":[{{"index":0,"message":{{"role":"assistant","content":"{COMPLETION_TEXT}"}},"finish_reason":"stop"}}],"usage":{usage}}}"#,
        json_escape(model)
    )
}

/// An OpenAI completion body for `model` (`"object": "text_completion"`):
/// one choice, [`COMPLETION_TEXT`], and a fixed token usage.
pub(crate) fn completion_response(model: &str) -> String {
    completion_with_usage(model, USAGE)
}

/// [`completion_response`] with `usage` (a JSON object) as its usage.
pub(crate) fn completion_with_usage(model: &str, usage: &str) -> String {
    format!(
        r#"{{"id":"cmpl-sim","object":"text_completion","created":0,"model":"{}","choices":[{{"index":0,"text":"{COMPLETION_TEXT}","logprobs":null,"finish_reason":"stop"}}],"usage":{usage}}}"#,
        json_escape(model)
    )
}

/// An OpenAI embeddings body for `model` (`"object": "list"`): one
/// embedding of four dimensions.
pub(crate) fn embedding_response(model: &str) -> String {
    format!(
        r#"{{"object":"list","data":[{{"object":"embedding","index":0,"embedding":[0.5,0.5,0.5,0.5]}}],"model":"{}","usage":{{"prompt_tokens":4,"total_tokens":4}}}}"#,
        json_escape(model)
    )
}

/// The fixed token usage of a simulated completion.
const USAGE: &str = r#"{"prompt_tokens":4,"completion_tokens":3,"total_tokens":7}"#;

/// `text` escaped for the inside of a JSON string.
pub(crate) fn json_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => escaped.push_str("\\\""),
            '\\' => escaped.push_str("\\\\"),
            c if c.is_control() => escaped.push_str(&format!("\\u{:04x}", c as u32)),
            c => escaped.push(c),
        }
    }
    escaped
}

#[cfg(test)]
mod tests;
