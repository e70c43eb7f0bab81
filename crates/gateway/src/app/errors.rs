//! What the gateway answers for an error of its stack: a status, a
//! `Retry-After` where waiting helps, and an OpenAI-shaped JSON body
//! `{"error": {"message", "type", "param", "code"}}` — or, on the KServe v2 routes
//! (`/v2/…`), the protocol's own `{"error": "message"}`, which KServe v2
//! clients (tritonclient) read.
//!
//! | error (anywhere in the `source()` chain) | status | `Retry-After` |
//! | --- | --- | --- |
//! | `InvalidRoute` (no, or an invalid, model ID: `param` is `model`; a body that is malformed, truncated or not a JSON object: code `invalid_json`) | 400 | |
//! | `UnknownModel` (not in the backend's repository) | 404 | |
//! | `PayloadTooLarge` (body over the limit) | 413 | |
//! | `Overloaded { retry_after }` (every candidate at its admission limit: shed) | 429 | `retry_after` rounded up, at least 1 s |
//! | `NoHealthyBackend` (every candidate's breaker open) | 503 | 1 s |
//! | `BreakerOpen { retry_after }` | 503 | `retry_after` rounded up, at least 1 s |
//! | `ModelLoadFailed` | 503 | 1 s |
//! | `PhaseElapsed` (no first token in time: `first_token_timeout`; a stall: `backend_stalled`) | 504 | |
//! | `BackendUnresponsive` (its probes went unanswered while the request waited: `backend_unresponsive`) | 504 | |
//! | tower's `Elapsed` (a timeout of a layer's) | 504 | |
//! | anything else (connect, transport) | 502 | |
//!
//! No message names a backend (its ID may be its address): a transport
//! error says only its kind (`connection refused`), and is logged whole at
//! `debug`.

use std::error::Error;
use std::time::Duration;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use tower::timeout::error::Elapsed;

use super::phases::{Phase, PhaseElapsed};
use super::unresponsive::BackendUnresponsive;
use tower_model_balance::error::{
    BreakerOpen, InvalidReason, InvalidRoute, ModelLoadFailed, NoHealthyBackend, Overloaded,
    PayloadTooLarge, StreamFailed, UnknownModel,
};

/// `Retry-After` for [`NoHealthyBackend`], which carries no wait of its
/// own: one second, the least the header can say.
pub const NO_BACKEND_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The gateway's answer to one error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorReply {
    /// The HTTP status.
    pub status: StatusCode,
    /// Seconds for `Retry-After`, when waiting helps.
    pub retry_after: Option<u64>,
    /// The OpenAI error `type`.
    pub kind: &'static str,
    /// The OpenAI error `code`.
    pub code: &'static str,
    /// The OpenAI error `param`: the request field at fault, if one is.
    pub param: Option<&'static str>,
    /// The error `message`: the error's own text.
    pub message: String,
    /// The body in KServe v2's shape, `{"error": "message"}`.
    pub kserve: bool,
    /// The backend the error came from, when the error names it: for the
    /// access log only, never in the answer.
    pub backend: Option<String>,
}

/// A request body that could not be read whole: over `limit` bytes (413,
/// as the route layer answers), else broken off or malformed by the
/// client (400).
pub fn unreadable_body(error: &(dyn Error + 'static), limit: usize) -> ErrorReply {
    let mut next = Some(error);
    while let Some(err) = next {
        if err.is::<http_body_util::LengthLimitError>() {
            return classify(&tower_model_balance::error::PayloadTooLarge::new(limit));
        }
        next = err.source();
    }
    ErrorReply::new(
        StatusCode::BAD_REQUEST,
        "invalid_request_error",
        "unreadable_body",
        format!("the request body could not be read: {error}"),
    )
}

/// A request body not read whole within the gateway's body deadline: 408.
pub fn body_timeout(deadline: std::time::Duration) -> ErrorReply {
    ErrorReply::new(
        StatusCode::REQUEST_TIMEOUT,
        "invalid_request_error",
        "body_timeout",
        format!(
            "the request body was not received within {} s",
            deadline.as_secs_f64()
        ),
    )
}

/// Maps an error of the stack to the gateway's answer. The stack boxes
/// its typed errors as they are, but a layer may wrap one (a client error
/// holding its cause), so the whole `source()` chain is searched, outermost
/// first.
pub fn classify(error: &(dyn Error + 'static)) -> ErrorReply {
    let mut next = Some(error);
    while let Some(err) = next {
        if let Some(reply) = known(err) {
            return reply;
        }
        next = err.source();
    }
    // The whole chain for the operator; for the client what failed,
    // never where: an error's text may hold a backend's address.
    tracing::debug!(error = %Chain(error), "a request to a backend failed");
    let mut reply = reply(
        StatusCode::BAD_GATEWAY,
        "upstream_error",
        "bad_gateway",
        error,
    );
    reply.message = match io_kind(error) {
        Some(kind) => format!("the request to the backend failed: {kind}"),
        None => "the request to the backend failed".to_owned(),
    };
    reply
}

/// The kind of the first I/O error in `error`'s chain (connection refused,
/// reset), if one is there.
fn io_kind(error: &(dyn Error + 'static)) -> Option<std::io::ErrorKind> {
    let mut next = Some(error);
    while let Some(err) = next {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        next = err.source();
    }
    None
}

/// An error and its causes, `: `-separated, for the log.
struct Chain<'a>(&'a (dyn Error + 'static));

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(err) = cause {
            write!(f, ": {err}")?;
            cause = err.source();
        }
        Ok(())
    }
}

/// The answer for `err` itself, if it is one of the known errors.
fn known(err: &(dyn Error + 'static)) -> Option<ErrorReply> {
    let unavailable = StatusCode::SERVICE_UNAVAILABLE;
    let invalid = "invalid_request_error";
    let answer = if let Some(route) = err.downcast_ref::<InvalidRoute>() {
        invalid_route(route)
    } else if let Some(unknown) = err.downcast_ref::<UnknownModel>() {
        // Not the backend's name: it may be its address.
        let mut r = reply(StatusCode::NOT_FOUND, invalid, "model_not_found", err);
        r.message = format!("the model `{}` does not exist", unknown.model);
        r
    } else if err.is::<PayloadTooLarge>() {
        reply(
            StatusCode::PAYLOAD_TOO_LARGE,
            invalid,
            "payload_too_large",
            err,
        )
    } else if let Some(shed) = err.downcast_ref::<Overloaded>() {
        // 429, as vLLM and OpenAI answer a full server: the client's
        // retry policy backs off, where a 503 reads as the gateway down.
        let mut r = reply(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            "overloaded",
            err,
        );
        r.retry_after = Some(retry_after_secs(shed.retry_after));
        r
    } else if err.is::<NoHealthyBackend>() {
        let mut r = reply(
            unavailable,
            "service_unavailable",
            "no_healthy_backend",
            err,
        );
        r.retry_after = Some(retry_after_secs(NO_BACKEND_RETRY_AFTER));
        r
    } else if let Some(open) = err.downcast_ref::<BreakerOpen>() {
        let mut r = reply(unavailable, "service_unavailable", "breaker_open", err);
        r.retry_after = Some(retry_after_secs(open.retry_after));
        r
    } else if let Some(failed) = err.downcast_ref::<ModelLoadFailed>() {
        let mut r = reply(unavailable, "service_unavailable", "model_load_failed", err);
        r.message = format!("loading the model `{}` failed", failed.model);
        // Another replica, or this one a second later (a load queue full,
        // a load just failed), may serve it.
        r.retry_after = Some(retry_after_secs(NO_BACKEND_RETRY_AFTER));
        r.backend = Some(failed.backend.to_string());
        r
    } else if err.is::<StreamFailed>() {
        // Nothing of the stream reached the client: a plain error answer.
        reply(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            "stream_failed",
            err,
        )
    } else if let Some(cut) = err.downcast_ref::<BackendUnresponsive>() {
        let mut r = reply(
            StatusCode::GATEWAY_TIMEOUT,
            "upstream_error",
            "backend_unresponsive",
            err,
        );
        r.backend = cut.backend.as_ref().map(ToString::to_string);
        r
    } else if let Some(elapsed) = err.downcast_ref::<PhaseElapsed>() {
        let code = match elapsed.phase {
            Phase::FirstToken => "first_token_timeout",
            _ => "backend_stalled",
        };
        let mut r = reply(StatusCode::GATEWAY_TIMEOUT, "upstream_error", code, err);
        r.backend = elapsed.backend.as_ref().map(ToString::to_string);
        r
    } else if err.is::<Elapsed>() {
        reply(
            StatusCode::GATEWAY_TIMEOUT,
            "upstream_error",
            "upstream_timeout",
            err,
        )
    } else {
        return None;
    };
    Some(answer)
}

/// A 400 for a route that could not be read: from the body, the reply
/// says what was wrong with the JSON, or names the `model` field.
fn invalid_route(route: &InvalidRoute) -> ErrorReply {
    let invalid = "invalid_request_error";
    let mut reply = reply(StatusCode::BAD_REQUEST, invalid, "invalid_route", route);
    if route.source != "body" {
        return reply;
    }
    if route.reason.is_json() {
        reply.code = "invalid_json";
        reply.message = format!("the request body: {}", route.reason);
        return reply;
    }
    reply.param = Some("model");
    reply.message = match route.reason {
        InvalidReason::Missing => {
            reply.code = "model_missing";
            "the request names no `model`, and the fleet serves more than one: name one of \
             `GET /v1/models`"
                .to_owned()
        }
        reason => format!("the request's `model`: {reason}"),
    };
    reply
}

fn reply(
    status: StatusCode,
    kind: &'static str,
    code: &'static str,
    err: &(dyn Error + 'static),
) -> ErrorReply {
    ErrorReply {
        status,
        retry_after: None,
        kind,
        code,
        param: None,
        message: err.to_string(),
        kserve: false,
        backend: None,
    }
}

/// Whole seconds for `Retry-After`: `wait` rounded up, at least 1 (a
/// `Retry-After: 0` invites an immediate retry storm).
pub fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait
        .as_secs()
        .saturating_add(u64::from(wait.subsec_nanos() > 0));
    secs.max(1)
}

impl ErrorReply {
    /// A reply of the gateway's own (no such route, wrong method).
    pub fn new(
        status: StatusCode,
        kind: &'static str,
        code: &'static str,
        message: String,
    ) -> Self {
        Self {
            status,
            retry_after: None,
            kind,
            code,
            param: None,
            message,
            kserve: false,
            backend: None,
        }
    }

    /// The same reply, in KServe v2's shape when `path` is a KServe v2
    /// route (`/v2/…`).
    pub fn for_path(mut self, path: &str) -> Self {
        self.kserve = path.starts_with("/v2/") || path == "/v2";
        self
    }

    /// The JSON body: `{"error": {"message", "type", "param", "code"}}`
    /// (`param` null unless a field is at fault), or KServe v2's
    /// `{"error": "message"}`.
    pub fn body(&self) -> String {
        if self.kserve {
            return serde_json::json!({ "error": self.message }).to_string();
        }
        serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
        .to_string()
    }

    /// The reply as a whole HTTP/1.1 response that closes its connection,
    /// for a connection no router serves (refused at the connection
    /// bound, `connection.rs`): the status line, `Content-Type`,
    /// `Content-Length`, `Retry-After` when set, `Connection: close`, and
    /// the [`body`](Self::body). Counted in [`ERRORS_SERIES`], as the
    /// router's answers are.
    pub fn into_http1_close(self) -> Vec<u8> {
        metrics::counter!(ERRORS_SERIES, "code" => self.code).increment(1);
        let body = self.body();
        let mut head = format!(
            "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
            self.status.as_u16(),
            self.status.canonical_reason().unwrap_or_default(),
            body.len()
        );
        if let Some(secs) = self.retry_after {
            head.push_str(&format!("retry-after: {secs}\r\n"));
        }
        head.push_str("connection: close\r\n\r\n");
        head.push_str(&body);
        head.into_bytes()
    }
}

/// The series counting the gateway's own error answers, by `code` (the
/// OpenAI error code: `invalid_route`, `payload_too_large`, `body_timeout`,
/// ...): every refusal, including those made before the balancer (a body
/// over the limit, unreadable or late), which its `invalid_route` branch
/// never sees.
pub const ERRORS_SERIES: &str = "gateway_errors_total";

impl IntoResponse for ErrorReply {
    /// The reply as a response, counted in [`ERRORS_SERIES`].
    fn into_response(self) -> Response {
        metrics::counter!(ERRORS_SERIES, "code" => self.code).increment(1);
        let mut response = (self.status, self.body()).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(secs) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
            .extensions_mut()
            .insert(super::access_log::ErrorCode(self.code));
        response
    }
}

#[cfg(test)]
mod tests;

/// Whether `error` is a body that names no model.
pub fn is_missing_model(error: &(dyn std::error::Error + 'static)) -> bool {
    error
        .downcast_ref::<tower_model_balance::error::InvalidRoute>()
        .is_some_and(|r| r.source == "body" && r.reason == InvalidReason::Missing)
}

/// A 503 with `Retry-After` while no backend serves a model.
pub fn no_model_served() -> ErrorReply {
    let mut reply = ErrorReply::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "service_unavailable",
        "no_healthy_backend",
        "no backend serves a model now".to_owned(),
    );
    reply.retry_after = Some(retry_after_secs(NO_BACKEND_RETRY_AFTER));
    reply
}
