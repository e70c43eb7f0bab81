//! The replies the handlers build: [`SimResponse`], and the plain, JSON
//! and fault (503) answers.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use http::{Response, StatusCode};

use super::state::State;

/// An answer as the handlers build it; [`Wire::of`](super::wire::Wire::of)
/// turns it into what is sent.
pub(super) type SimResponse = Response<Bytes>;

/// A 503 for a fault, counted.
pub(super) fn unavailable(state: &State) -> SimResponse {
    state.counters.unavailable.fetch_add(1, Ordering::Relaxed);
    plain(StatusCode::SERVICE_UNAVAILABLE, "unavailable")
}

/// A response with a JSON body.
pub(super) fn json(status: StatusCode, body: &str) -> SimResponse {
    let mut response = plain(status, body);
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// A response with a text body (no content type).
pub(super) fn plain(status: StatusCode, body: &str) -> SimResponse {
    let mut response = Response::new(Bytes::copy_from_slice(body.as_bytes()));
    *response.status_mut() = status;
    response
}
