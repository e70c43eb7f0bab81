//! The simulated model server's wire protocol, written down once.
//!
//! A subset of the KServe Open Inference Protocol v2 (as served by Triton and
//! KServe model servers), plus response headers that report what the
//! simulation did:
//!
//! | request | response |
//! | --- | --- |
//! | `GET /v2/health/ready` | 200 when serving, 503 while a fault makes the server unavailable |
//! | `POST /v2/models/{name}/infer` (any JSON body, read whole) | 200 with a v2 inference response; 503 while unavailable; 400 for an unreadable body or invalid model name |
//! | anything else | 404 |
//!
//! An inference request with header `x-request-kind: update` is served as an
//! update: a fixed time, no resident model needed. Every 200 response to an
//! inference or update carries [`COLD_LOAD_HEADER`] and [`BACKEND_HEADER`].

use http::HeaderName;

/// Response header: `true` when the request waited for its model to load
/// (a cold load), `false` when the model was resident.
pub const COLD_LOAD_HEADER: HeaderName = HeaderName::from_static("x-sim-cold-load");
/// Response header: the name of the simulated backend that served the
/// request.
pub const BACKEND_HEADER: HeaderName = HeaderName::from_static("x-sim-backend");
/// Readiness path.
pub const READY_PATH: &str = "/v2/health/ready";

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
    let mut name = String::with_capacity(model.len());
    for c in model.chars() {
        match c {
            '"' => name.push_str("\\\""),
            '\\' => name.push_str("\\\\"),
            c if c.is_control() => name.push_str(&format!("\\u{:04x}", c as u32)),
            c => name.push(c),
        }
    }
    format!(
        r#"{{"model_name":"{name}","outputs":[{{"name":"output0","datatype":"FP32","shape":[1],"data":[0.5]}}]}}"#
    )
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
