//! Circuit breaking: fail fast around a sick backend, probe it back.
//!
//! A breaker is Closed (traffic flows, outcomes counted over a count-based
//! sliding window), Open (every call fails fast with [`BreakerOpen`]) or
//! HalfOpen (a few probe calls decide). It trips on the failure *rate* once
//! the window holds a minimum of calls, so one or two blips never open it.
//! The decision logic is a pure state machine ([`CircuitState`]) that takes
//! `now` and outcomes; [`Breaker`] shares it between clones, and
//! [`CircuitBreakerLayer`] puts it in front of any `Service`. The balancer
//! keeps one [`Breaker`] per backend.
//!
//! Admission is an RAII [`Permit`]: a call dropped before it finished (its
//! future dropped) gives its permit back and counts nothing, so a cancelled
//! probe never wedges a half-open breaker.
//!
//! [`CircuitBreaker`] **sheds**: while open it stays ready and `call` fails
//! fast; while closed or half-open, `poll_ready` drives the inner service to
//! ready first, and `call` never forwards to an inner service it has not
//! driven to ready. Stack timeouts *below* the breaker, so that a timeout is
//! an error the breaker counts rather than a cancellation.
//!
//! ```
//! use bytes::Bytes;
//! use http_body_util::Empty;
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_model_balance::breaker::{CircuitBreakerLayer, Policy};
//! use tower_model_balance::error::BreakerOpen;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let policy = Policy::builder().window(4).minimum_calls(4).build().unwrap();
//! let mut svc = ServiceBuilder::new()
//!     .layer(CircuitBreakerLayer::new(policy))
//!     .service(service_fn(|_req: http::Request<()>| async {
//!         let rsp = http::Response::builder().status(503).body(Empty::<Bytes>::new());
//!         Ok::<_, std::io::Error>(rsp.unwrap())
//!     }));
//! for _ in 0..4 {
//!     let rsp = svc.ready().await.unwrap().call(http::Request::new(())).await.unwrap();
//!     assert_eq!(rsp.status(), 503);
//! }
//! let err = svc.ready().await.unwrap().call(http::Request::new(())).await.unwrap_err();
//! assert!(err.is::<BreakerOpen>());
//! # }
//! ```
//!
//! # Classification: what counts, and when
//!
//! What a call's result means for the backend is decided apart from the
//! breaker, by a [`Classify`] (in the manner of tower-http's `classify`):
//! [`ServerErrorsAsFailures`] for HTTP (the default: 5xx fail, 429 is an
//! overload, other 4xx are the caller's and ignored), [`GrpcErrorsAsFailures`]
//! for gRPC (`grpc-status` decides, from the headers of a trailers-only
//! response or else from the trailers), or a closure
//! `Fn(Result<&Response, &Error>) -> Outcome`. Errors without a response —
//! a timeout stacked below the breaker (tower's `Elapsed`), a connection
//! refused or reset — fail by default.
//!
//! A response's outcome is **recorded at the end of its body**, which a
//! [`ResponseBody`] wraps without allocating: at its last frame, at a body
//! error (a failure, whatever the status), or when it is dropped (the
//! status decides: a 503 counts whether or not its body is read; a gRPC
//! stream dropped before its trailers is a cancellation, ignored). Until
//! then the call is in flight, so a half-open probe that is still streaming
//! keeps its permit. An empty body records at once.
//!
//! **Slow calls** are timed from admission to a [`StopPoint`] set on the
//! layer: the response's head, its first frame (the default: for a stream
//! of tokens, close to the time to first token), or its end.
//!
//! **Cold loads**: a response that says the backend loaded the model for
//! it ([`CircuitBreakerLayer::cold_load`]) is recorded untimed, so model
//! loading never counts as a slow call; its outcome still counts.
//!
//! ```
//! use std::time::Duration;
//! use tower_model_balance::breaker::{
//!     CircuitBreakerLayer, GrpcErrorsAsFailures, Policy, StopPoint,
//! };
//!
//! let policy = Policy::builder().slow_call_duration(Duration::from_secs(2)).build().unwrap();
//! let layer = CircuitBreakerLayer::new(policy)
//!     .classifier(GrpcErrorsAsFailures::new())
//!     .stop_point(StopPoint::FirstFrame)
//!     .cold_load(|rsp: &http::Response<hyper::body::Incoming>| {
//!         rsp.headers().contains_key("x-model-cold-load")
//!     });
//! # drop(layer);
//! ```
//!
//! [`BreakerOpen`]: crate::error::BreakerOpen

mod body;
mod classify;
mod events;
pub mod future;
mod layer;
mod policy;
mod service;
mod shared;
mod state;
mod window;

pub use self::body::{ResponseBody, StopPoint};
pub use self::classify::{
    Classified, Classify, ClassifyEos, ColdLoad, GrpcEosErrorsAsFailures, GrpcErrorsAsFailures,
    ServerErrorsAsFailures,
};
pub use self::events::OnTransition;
pub use self::layer::CircuitBreakerLayer;
pub use self::policy::{Policy, PolicyBuilder, SlidingWindow};
pub use self::service::CircuitBreaker;
pub use self::shared::{Breaker, Permit};
pub use self::state::{
    BreakerState, CircuitState, Metrics, Mode, Reason, Refused, Ticket, Transition,
};

/// How one call went, as far as the breaker is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// The backend served the call.
    Success,
    /// The backend failed the call (5xx, timeout, connection error).
    Failure,
    /// The backend shed the call (429 Too Many Requests, gRPC
    /// `RESOURCE_EXHAUSTED`): a failure for the failure rate, but it
    /// neither counts toward nor breaks a run of consecutive failures — an
    /// overloaded backend is up.
    Overload,
    /// Says nothing about the backend (a caller's 4xx): not counted, but a
    /// half-open permit comes back.
    Ignored,
}
