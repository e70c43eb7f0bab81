//! What the breaker layer's tests share: a quick-tripping policy and
//! empty-bodied responses.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use tower_model_balance::breaker::BreakerConfigBuilder;

/// Responses with empty bodies: the breaker records as soon as the head
/// arrives.
pub type Rsp = http::Response<Empty<Bytes>>;

/// Trips on 2 failures of the last 4 calls, open 10 s exactly (no jitter).
pub fn quick_trip() -> BreakerConfigBuilder {
    tower_model_balance::breaker::BreakerConfig::builder()
        .window(4)
        .minimum_calls(2)
        .failure_rate_threshold(0.5)
        .open_duration(Duration::from_secs(10))
        .jitter(false)
}

/// An empty response with status `code`.
pub fn status(code: u16) -> Rsp {
    http::Response::builder()
        .status(code)
        .body(Empty::new())
        .unwrap()
}
