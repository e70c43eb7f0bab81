//! The simulated model server's wire protocol, written down once.
//!
//! A subset of the KServe Open Inference Protocol v2 (as served by Triton and
//! KServe model servers), Triton's model repository index, the OpenAI
//! model list (as vLLM serves it) and Prometheus metrics in both vLLM's and
//! Triton's names, plus response headers that report what the simulation
//! did:
//!
//! | request | response |
//! | --- | --- |
//! | `GET /v2/health/ready` | 200 when serving, 503 while a fault makes the server unavailable |
//! | `POST /v2/models/{name}/infer` (any JSON body, read whole) | 200 with a v2 inference response; 503 while unavailable; 400 for an unreadable body or invalid model name |
//! | `POST /v2/repository/index` (any body, read whole) | 200 with a JSON array: each resident model `{"name", "version": "1", "state": "READY", "reason": ""}` (`"LOADING"` while its load is in progress), then each model evicted since and not resident again, most recent first, at most [`Residency::EVICTED_KEPT`](super::Residency::EVICTED_KEPT), with `"state": "UNAVAILABLE", "reason": "unloaded"`; 503 while unavailable |
//! | `GET /v1/models` | 200 with an OpenAI model list `{"object": "list", "data": [{"id", "object": "model", "created": 0, "owned_by": "sim"}]}` of the loaded models (not those loading); 503 while unavailable |
//! | `GET /metrics` | 200 with Prometheus text (see below); 503 while unavailable |
//! | anything else | 404 |
//!
//! Lists are sorted by model name, except the evicted models. An inference
//! request with header `x-request-kind: update` is served as an update: a
//! fixed time, no resident model needed. Every 200 response to an
//! inference or update carries [`COLD_LOAD_HEADER`], [`BACKEND_HEADER`] and
//! [`RESIDENT_MODELS_HEADER`].
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
//! One simulated GPU, its UUID derived from the server's name.

use http::HeaderName;

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
/// Readiness path.
pub const READY_PATH: &str = "/v2/health/ready";
/// Triton's model repository index path (POST).
pub const REPOSITORY_INDEX_PATH: &str = "/v2/repository/index";
/// The OpenAI model list path.
pub const MODELS_PATH: &str = "/v1/models";
/// The Prometheus metrics path.
pub const METRICS_PATH: &str = "/metrics";

/// The inference path for `model`.
pub fn infer_path(model: &str) -> String {
    format!("/v2/models/{model}/infer")
}

/// The model name of an inference path, if `path` is one.
pub fn parse_infer_path(path: &str) -> Option<&str> {
    let name = path.strip_prefix("/v2/models/")?.strip_suffix("/infer")?;
    (!name.is_empty() && !name.contains('/')).then_some(name)
}

/// A KServe v2 inference response body for `model`, valid JSON whatever
/// the name holds.
pub fn infer_response(model: &str) -> String {
    let name = json_escape(model);
    format!(
        r#"{{"model_name":"{name}","outputs":[{{"name":"output0","datatype":"FP32","shape":[1],"data":[0.5]}}]}}"#
    )
}

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
mod tests {
    use super::*;

    #[test]
    fn infer_response_escapes_the_name() {
        let body = infer_response(r#"a"b\c"#);
        assert!(body.starts_with(r#"{"model_name":"a\"b\\c","#), "{body}");
    }

    #[test]
    fn infer_paths_round_trip() {
        assert_eq!(
            parse_infer_path(&infer_path("resnet-50")),
            Some("resnet-50")
        );
        assert_eq!(parse_infer_path("/v2/models//infer"), None);
        assert_eq!(parse_infer_path("/v2/models/a/b/infer"), None);
        assert_eq!(parse_infer_path("/v2/models/a/ready"), None);
    }
}
