//! The gateway's bounds on what its clients hold at once: requests in
//! flight, request-body bytes buffered, and each route family's body
//! limit. Past a bound a request is answered 503 with `Retry-After` at
//! once (an outer load balancer may send it to another replica), never
//! queued: a flood waits in no memory of the gateway's. A body's bytes
//! count against the bound as they arrive ([`Reservation`]), not as
//! announced: a client announcing 64 MiB and sending slowly holds what it
//! sent ([`HELD_SERIES`]).

use std::sync::Arc;

use axum::http::StatusCode;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::config::Config;
use super::errors::{retry_after_secs, ErrorReply, NO_BACKEND_RETRY_AFTER};

/// The gauge of request-body bytes held now, in all (whole KiB per
/// request), against `--max-buffered-bytes`.
pub const HELD_SERIES: &str = "gateway_request_body_bytes_held";

/// The bounds, shared by every request.
#[derive(Debug, Clone)]
pub struct Limits {
    requests: Arc<Semaphore>,
    max_requests: usize,
    /// Request-body bytes, in KiB.
    buffered: Arc<Semaphore>,
    max_buffered_bytes: usize,
    /// [`HELD_SERIES`], looked up once (made after the recorder is
    /// installed), not at each body frame.
    held: metrics::Gauge,
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
            held: metrics::gauge!(HELD_SERIES),
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

    /// Room for a request's body among those held at once, empty until
    /// its bytes arrive ([`Reservation::grow_to`]): a client that
    /// announces a large body and sends it slowly holds what it sent, not
    /// what it announced.
    pub fn reserve(&self) -> Reservation {
        Reservation {
            buffered: Arc::clone(&self.buffered),
            max_buffered_bytes: self.max_buffered_bytes,
            gauge: self.held.clone(),
            held: None,
            kib: 0,
        }
    }
}

/// A request's room among the body bytes held at once, in KiB, grown as
/// its body arrives and given back when dropped (at the answer's head).
#[derive(Debug)]
pub struct Reservation {
    buffered: Arc<Semaphore>,
    max_buffered_bytes: usize,
    gauge: metrics::Gauge,
    held: Option<OwnedSemaphorePermit>,
    kib: usize,
}

impl Reservation {
    /// Room for `bytes` in all: what is held, grown by the difference.
    ///
    /// # Errors
    ///
    /// Not that much room left among every request's: the 503 to answer
    /// (what the request held is given back when it is dropped).
    pub fn grow_to(&mut self, bytes: usize) -> Result<(), ErrorReply> {
        let more = kib(bytes).saturating_sub(self.kib);
        if more == 0 {
            return Ok(());
        }
        let permits = u32::try_from(more).unwrap_or(u32::MAX);
        let grown = Arc::clone(&self.buffered)
            .try_acquire_many_owned(permits)
            .map_err(|_| {
                overloaded(format!(
                    "the gateway holds its limit of {} request-body bytes",
                    self.max_buffered_bytes
                ))
            })?;
        match &mut self.held {
            Some(held) => held.merge(grown),
            None => self.held = Some(grown),
        }
        self.kib += more;
        self.gauge.increment((more * 1024) as f64);
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.kib > 0 {
            self.gauge.decrement((self.kib * 1024) as f64);
        }
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
    fn bodies_held_at_once_are_bounded_in_bytes_as_they_arrive() {
        let limits = limits(|c| c.max_buffered_bytes = 10 * 1024);
        // Nothing held before a byte arrives.
        let mut a = limits.reserve();
        let mut b = limits.reserve();
        a.grow_to(2 * 1024).unwrap();
        a.grow_to(6 * 1024).unwrap();
        a.grow_to(5 * 1024).unwrap();
        assert!(b.grow_to(5 * 1024).is_err());
        b.grow_to(4 * 1024).unwrap();
        // Partial KiB round up: 10 KiB held, not a byte more.
        let mut c = limits.reserve();
        assert!(c.grow_to(1).is_err());
        drop(a);
        c.grow_to(6 * 1024).unwrap();
        assert!(b.grow_to(4 * 1024 + 1).is_err());
    }
}
