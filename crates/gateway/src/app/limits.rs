//! The gateway's bounds on what its clients hold at once: requests in
//! flight, request-body bytes buffered, and each route family's body
//! limit. Past a bound a request is answered 503 with `Retry-After` at
//! once (an outer load balancer may send it to another replica), never
//! queued: a flood waits in no memory of the gateway's.

use std::sync::Arc;

use axum::http::StatusCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::errors::{retry_after_secs, ErrorReply, NO_BACKEND_RETRY_AFTER};
use super::Config;

/// The bounds, shared by every request.
#[derive(Debug, Clone)]
pub struct Limits {
    requests: Arc<Semaphore>,
    max_requests: usize,
    /// Request-body bytes, in KiB.
    buffered: Arc<Semaphore>,
    max_buffered_bytes: usize,
    json_body: usize,
    tensor_body: usize,
}

impl Limits {
    /// The bounds `config` sets.
    pub fn new(config: &Config) -> Self {
        let kib = kib(config.max_buffered_bytes).min(Semaphore::MAX_PERMITS);
        Self {
            requests: Arc::new(Semaphore::new(
                config.max_requests.min(Semaphore::MAX_PERMITS),
            )),
            max_requests: config.max_requests,
            buffered: Arc::new(Semaphore::new(kib)),
            max_buffered_bytes: config.max_buffered_bytes,
            json_body: config.json_body_limit.min(config.body_limit),
            tensor_body: config.body_limit,
        }
    }

    /// The most body bytes a request on `path` may send: KServe v2's
    /// routes (`/v2/…`) carry tensors, the others JSON.
    pub fn body_limit(&self, path: &str) -> usize {
        if path.starts_with("/v2/") {
            self.tensor_body
        } else {
            self.json_body
        }
    }

    /// A request's slot among those in flight, held until its answer
    /// ends.
    ///
    /// # Errors
    ///
    /// Every slot is taken: the 503 to answer.
    pub fn request_slot(&self) -> Result<OwnedSemaphorePermit, ErrorReply> {
        self.requests.clone().try_acquire_owned().map_err(|_| {
            overloaded(format!(
                "the gateway has {} requests in flight, its limit",
                self.max_requests
            ))
        })
    }

    /// Room for `bytes` of request body, held until the answer's head.
    ///
    /// # Errors
    ///
    /// Not that much room: the 503 to answer.
    pub fn buffer(&self, bytes: usize) -> Result<OwnedSemaphorePermit, ErrorReply> {
        let kib = u32::try_from(kib(bytes)).unwrap_or(u32::MAX);
        self.buffered
            .clone()
            .try_acquire_many_owned(kib)
            .map_err(|_| {
                overloaded(format!(
                    "the gateway holds its limit of {} request-body bytes",
                    self.max_buffered_bytes
                ))
            })
    }
}

/// `bytes` in KiB, rounded up.
fn kib(bytes: usize) -> usize {
    bytes.div_ceil(1024)
}

/// A 503 with `Retry-After`: this replica is full, another may not be
/// (a request past a bound here, a connection past the connection bound,
/// `connection.rs`).
pub fn overloaded(message: String) -> ErrorReply {
    let mut reply = ErrorReply::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "service_unavailable",
        "gateway_overloaded",
        message,
    );
    reply.retry_after = Some(retry_after_secs(NO_BACKEND_RETRY_AFTER));
    reply
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(edit: impl FnOnce(&mut Config)) -> Limits {
        let mut config = Config::new(Vec::new());
        edit(&mut config);
        Limits::new(&config)
    }

    #[test]
    fn kserve_routes_take_the_tensor_limit_the_others_the_json_one() {
        let limits = limits(|c| {
            c.body_limit = 64 << 20;
            c.json_body_limit = 1 << 20;
        });
        assert_eq!(limits.body_limit("/v2/models/m/infer"), 64 << 20);
        assert_eq!(limits.body_limit("/v1/chat/completions"), 1 << 20);
        assert_eq!(limits.body_limit("/generate"), 1 << 20);
    }

    #[test]
    fn past_the_requests_in_flight_a_503_until_one_ends() {
        let limits = limits(|c| c.max_requests = 2);
        let a = limits.request_slot().unwrap();
        let _b = limits.request_slot().unwrap();
        let refused = limits.request_slot().unwrap_err();
        assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(refused.code, "gateway_overloaded");
        assert_eq!(refused.retry_after, Some(1));
        drop(a);
        assert!(limits.request_slot().is_ok());
    }

    #[test]
    fn bodies_held_at_once_are_bounded_in_bytes() {
        let limits = limits(|c| c.max_buffered_bytes = 10 * 1024);
        let a = limits.buffer(6 * 1024).unwrap();
        assert!(limits.buffer(5 * 1024).is_err());
        let _small = limits.buffer(4 * 1024).unwrap();
        drop(a);
        assert!(limits.buffer(6 * 1024).is_ok());
    }
}
