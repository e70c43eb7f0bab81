//! The error answers' statuses, shapes and messages.

use super::*;

#[test]
fn kserve_v2_routes_get_the_protocols_error_shape() {
    let reply = ErrorReply::new(StatusCode::NOT_FOUND, "t", "c", "no model".into());
    let kserve = reply.clone().for_path("/v2/models/m/infer");
    assert_eq!(kserve.body(), r#"{"error":"no model"}"#);
    let openai = reply.for_path("/v1/chat/completions");
    assert!(openai.body().contains(r#""code":"c""#), "{}", openai.body());
}

#[test]
fn a_reply_written_raw_is_a_whole_http1_response_that_closes() {
    let mut reply = ErrorReply::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "service_unavailable",
        "gateway_overloaded",
        "full".into(),
    );
    reply.retry_after = Some(1);
    let body = reply.body();
    let raw = String::from_utf8(reply.into_http1_close()).unwrap();
    let (head, rest) = raw.split_once("\r\n\r\n").unwrap();
    assert_eq!(rest, body);
    let lines: Vec<&str> = head.split("\r\n").collect();
    assert_eq!(
        lines,
        [
            "HTTP/1.1 503 Service Unavailable",
            "content-type: application/json",
            &format!("content-length: {}", body.len()),
            "retry-after: 1",
            "connection: close",
        ]
    );
}
use tower_model_balance::backend::BackendId;
use tower_model_balance::error::BoxError;
use tower_model_balance::route::{ModelId, RouteInfo};

fn model() -> ModelId {
    ModelId::new("llama-3-8b").unwrap()
}

fn invalid_route() -> BoxError {
    // The crate builds `InvalidRoute` itself; take one from a header.
    let req = http::Request::post("/").body(()).unwrap();
    RouteInfo::from_request(&req).unwrap_err().into()
}

fn classified(err: BoxError) -> ErrorReply {
    classify(&*err)
}

#[test]
fn each_error_has_its_status() {
    let backend = BackendId::new("gpu-0").unwrap();
    let shed = Overloaded::for_tests(
        model(),
        tower_model_balance::route::Urgency::Normal,
        Duration::ZERO,
        Duration::from_millis(1_500),
    );
    let cases: [(BoxError, u16, Option<u64>, &str); 11] = [
        (shed.into(), 429, Some(2), "overloaded"),
        (invalid_route(), 400, None, "invalid_route"),
        (
            UnknownModel::for_tests(backend.clone(), model()).into(),
            404,
            None,
            "model_not_found",
        ),
        (
            PayloadTooLarge::new(1024).into(),
            413,
            None,
            "payload_too_large",
        ),
        (
            NoHealthyBackend::for_tests(model()).into(),
            503,
            Some(1),
            "no_healthy_backend",
        ),
        (
            BreakerOpen::for_tests(Duration::from_millis(4_200)).into(),
            503,
            Some(5),
            "breaker_open",
        ),
        (
            ModelLoadFailed::for_tests(backend.clone(), model(), "HTTP 500").into(),
            503,
            Some(1),
            "model_load_failed",
        ),
        (Elapsed::new().into(), 504, None, "upstream_timeout"),
        (
            BackendUnresponsive::new().on(Some(backend.clone())).into(),
            504,
            None,
            "backend_unresponsive",
        ),
        ("connection refused".into(), 502, None, "bad_gateway"),
        (
            std::io::Error::other("reset").into(),
            502,
            None,
            "bad_gateway",
        ),
    ];
    for (err, status, retry_after, code) in cases {
        let text = err.to_string();
        let reply = classified(err);
        // The access log names the backend a load failed on.
        let named = matches!(code, "model_load_failed" | "backend_unresponsive")
            .then(|| "gpu-0".to_owned());
        assert_eq!(reply.backend, named, "{text}");
        assert_eq!(reply.status, status, "{text}");
        assert_eq!(reply.retry_after, retry_after, "{text}");
        assert_eq!(reply.code, code, "{text}");
        // The backend's name (it may be its address) is left out;
        // every other message is the error's own.
        match code {
            "model_not_found" | "model_load_failed" | "bad_gateway" => {
                assert!(!reply.message.contains("gpu-0"), "{}", reply.message);
            }
            _ => assert_eq!(reply.message, text),
        }
    }
}

#[test]
fn retry_after_rounds_up_to_at_least_one_second() {
    assert_eq!(retry_after_secs(Duration::ZERO), 1);
    assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
    assert_eq!(retry_after_secs(Duration::from_secs(1)), 1);
    assert_eq!(retry_after_secs(Duration::from_millis(1_001)), 2);
    assert_eq!(retry_after_secs(Duration::from_secs(120)), 120);
    assert_eq!(retry_after_secs(Duration::MAX), u64::MAX);
}

/// An error that wraps another, as a client error wraps its cause.
#[derive(Debug)]
struct Wrapped(BoxError);

impl std::fmt::Display for Wrapped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("request failed")
    }
}

impl Error for Wrapped {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.0)
    }
}

#[test]
fn a_wrapped_error_is_found_in_the_chain() {
    let inner = BreakerOpen::for_tests(Duration::from_secs(3));
    let reply = classified(Box::new(Wrapped(Box::new(Wrapped(inner.into())))));
    assert_eq!(reply.status, 503);
    assert_eq!(reply.retry_after, Some(3));
    assert_eq!(reply.message, inner.to_string(), "the cause's own text");
}

#[test]
fn the_body_has_the_openai_error_shape() {
    let reply = classified(PayloadTooLarge::new(10).into());
    let body: serde_json::Value = serde_json::from_str(&reply.body()).unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(body["error"]["code"], "payload_too_large");
    assert_eq!(
        body["error"]["message"],
        "request body larger than 10 bytes"
    );
    let response = classified(NoHealthyBackend::for_tests(model()).into()).into_response();
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    assert_eq!(response.headers()[header::CONTENT_TYPE], "application/json");
}

#[test]
fn a_first_token_timeout_names_its_backend_for_the_log_only() {
    let backend = BackendId::new("gpu-0").unwrap();
    let elapsed = PhaseElapsed {
        phase: Phase::FirstToken,
        after: Duration::from_secs(60),
        backend: Some(backend),
    };
    let reply = classified(elapsed.into());
    assert_eq!(reply.code, "first_token_timeout");
    assert_eq!(reply.backend.as_deref(), Some("gpu-0"));
    assert!(!reply.message.contains("gpu-0"), "{}", reply.message);
}
