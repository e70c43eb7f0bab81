//! Circuit breaking: fail fast around a sick backend, probe it back.
//!
//! ```
//! use bytes::Bytes;
//! use http_body_util::Empty;
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_model_balance::breaker::{CircuitBreakerLayer, BreakerConfig};
//! use tower_model_balance::error::BreakerOpen;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let policy = BreakerConfig::builder().window(4).minimum_calls(4).build().unwrap();
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
//! A breaker is Closed (traffic flows, outcomes counted over a count- or
//! time-based sliding window), Open (every call fails fast with
//! [`BreakerOpen`]) or HalfOpen (a few probe calls decide). It trips on the
//! failure *rate* or the slow-call *rate* once the window holds a minimum
//! of calls (of timed calls for the slow-call rate), so one or two blips
//! never open it — or, if set, after a run of
//! consecutive failures (a hard outage). It stays open for an exponential
//! backoff with equal jitter: each open time is drawn in `[d / 2, d]` of the
//! backoff's ceiling `d` (AWS Architecture Blog, "Exponential Backoff And
//! Jitter", 2015), never less than half of it. The decision logic is a pure state machine
//! (internal) that takes `now` and outcomes; [`Breaker`] shares it
//! between clones (and is the handle: metrics, manual modes, a transition
//! hook), and [`CircuitBreakerLayer`] puts it in front of any HTTP
//! `Service`. The balancer keeps one [`Breaker`] per backend.
//!
//! Admission is an RAII [`Permit`]: a call dropped before it finished (its
//! future dropped) gives its permit back and counts nothing, so a cancelled
//! probe never wedges a half-open breaker.
//!
//! [`CircuitBreaker`] **sheds** by default: while open it stays ready and
//! `call` fails fast. Under a balancer it can **push back** instead
//! ([below](#when-open-fail-fast-or-backpressure)). Stack timeouts *below*
//! the breaker, so that a timeout is an error the breaker counts rather
//! than a cancellation ([why](#where-the-timeout-goes)). Outcomes are
//! recorded at the end of the response body
//! ([classification](#classification-what-counts-and-when)).
//!
//! # When open: fail fast or backpressure
//!
//! What [`CircuitBreaker`] does while its breaker does not admit (open, or
//! half-open with every probe out) is its [`WhenOpen`], set with
//! [`CircuitBreakerLayer::when_open`] or [`CircuitBreaker::with_when_open`]:
//!
//! * [`WhenOpen::FailFast`] (the default, for a breaker used alone, as in
//!   the example above) **sheds**: `poll_ready` stays ready and `call`
//!   fails at once with [`BreakerOpen`], whose `retry_after` says when a
//!   probe may go. While closed or half-open, `poll_ready` drives the inner
//!   service to ready first, and `call` never forwards to an inner service
//!   it has not driven to ready: a `call` without a ready `poll_ready`
//!   fails with [`NotReady`](crate::error::NotReady), in either mode (the
//!   crate's [readiness contract](crate#readiness)).
//! * [`WhenOpen::Backpressure`] (under a balancer) **pushes back**:
//!   `poll_ready` drives the inner service to ready (returning its errors),
//!   then is `Pending` until the breaker admits. It wakes itself without
//!   polling: by a timer until the open duration ends (re-armed whenever
//!   the breaker reopens with another duration) or, half-open with every
//!   probe out, until the round's deadline (`half_open_max_wait`); and the
//!   breaker wakes it at once on any transition (a round closing or
//!   reopening it), change of mode, or probe permit given back. Forced
//!   open, only a change of mode wakes it. tower's `balance::p2c::Balance`
//!   and `ReadyCache` take a pending service as unavailable, so traffic
//!   goes to the other backends until probes may go. Needs a Tokio runtime
//!   with time enabled.
//!
//! Under backpressure, `Ready` from `poll_ready` holds a **reservation**:
//! the call's [`Permit`], taken from the breaker then (while half-open, one
//! of its `half_open_permits` probes: services sharing a breaker reserve no
//! more than that between them). `call` takes it and it travels in the
//! response future; a service dropped before its `call` gives it back
//! uncounted, and a clone starts without one. A reservation belongs to the
//! breaker's state when it was taken: one half-open round, or one closed
//! spell. Ready stays ready until `call` (tower's contract), so a service
//! parked ready (in a balancer's ready cache) can outlive that state. Its
//! `call` then:
//!
//! * goes ahead under the reservation if the breaker has not moved (the
//!   same epoch: no transition or change of mode since) and, for a probe,
//!   its round is not past its deadline;
//! * otherwise (reserved half-open and the round has ended: closed,
//!   reopened or timed out; or reserved closed and the breaker has opened
//!   since) goes ahead under a fresh permit only if the breaker now admits
//!   freely (closed, disabled, metrics only), and else **fails fast** with
//!   [`BreakerOpen`] without touching the inner service. It never takes a
//!   probe it did not reserve; each service parked ready when its breaker
//!   trips fails at most one call.
//!
//! Each backend behind a breaker that pushes back (and a timeout below it),
//! under tower's P2C balancer: the open backend is pending, so every
//! request goes to the other.
//!
//! ```
//! use std::time::Duration;
//! use bytes::Bytes;
//! use http_body_util::Empty;
//! use tower::balance::p2c::Balance;
//! use tower::discover::ServiceList;
//! use tower::load::Constant;
//! use tower::{service_fn, Service, ServiceBuilder, ServiceExt};
//! use tower_model_balance::breaker::{WhenOpen, CircuitBreakerLayer, BreakerConfig};
//! use tower_model_balance::classify::Outcome;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), tower::BoxError> {
//! // Open for 5 s (no jitter: it could draw a shorter time).
//! let policy = BreakerConfig::builder().window(4).minimum_calls(2).jitter(false).build()?;
//! let backends: Vec<_> = (0..2)
//!     .map(|id| {
//!         ServiceBuilder::new()
//!             .layer(CircuitBreakerLayer::new(policy.clone()).when_open(WhenOpen::Backpressure))
//!             .timeout(Duration::from_secs(30))
//!             .service(service_fn(move |_req: http::Request<()>| async move {
//!                 let rsp = http::Response::builder().header("backend", id);
//!                 Ok::<_, std::io::Error>(rsp.body(Empty::<Bytes>::new()).unwrap())
//!             }))
//!     })
//!     .collect();
//! // Backend 0 fails twice: its breaker opens.
//! for _ in 0..2 {
//!     backends[0].breaker().try_acquire()?.record(Outcome::Failure);
//! }
//! let backends = backends.into_iter().map(|svc| Constant::new(svc, 0));
//! let mut balance = Balance::new(ServiceList::new(backends.collect::<Vec<_>>()));
//! for _ in 0..10 {
//!     let rsp = balance.ready().await?.call(http::Request::new(())).await?;
//!     assert_eq!(rsp.headers()["backend"], "1");
//! }
//! # Ok(()) }
//! ```
//!
//! # Where the timeout goes
//!
//! *Below* the breaker, as above: `ServiceBuilder::new().layer(breaker)
//! .timeout(t)`, a `ServiceBuilder`'s first layer being the outermost. The
//! timeout then turns a request that takes too long into an `Elapsed`
//! error, which the breaker sees as the call's outcome and counts as a
//! failure. Above the breaker, the timeout would drop the breaker's
//! response future instead: a cancellation, whose permit is given back
//! uncounted, so a backend that hangs would never trip its breaker.
//!
//! # Classification: what counts, and when
//!
//! What a call's result means for the backend is decided apart from the
//! breaker, by a [`Classify`] of the crate's [`classify`](crate::classify)
//! family, which the hedge and the balancer share (in the manner of
//! tower-http's `classify`):
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
//! keeps its permit. An empty body records at once. A response with no
//! streaming body (`http::Response<Bytes>`, a `reqwest::Response`, a
//! non-HTTP reply) records when it arrives instead:
//! [`CircuitBreakerLayer::at_response`], classified by a closure over
//! `Result<&Response, &Error>` where the given classifiers do not apply
//! (requirements: [`CircuitBreaker`]'s docs).
//!
//! **Slow calls** are timed from admission to a [`StopPoint`](crate::classify::StopPoint) set on the
//! layer: the response's head, its first frame (the default: for a stream
//! of tokens, close to the time to first token), or its end.
//!
//! **Cold loads**: a response that says the backend loaded the model for
//! it ([`CircuitBreakerLayer::cold_load`]) is recorded untimed, so model
//! loading never counts as a slow call; its outcome still counts.
//!
//! ```
//! use std::time::Duration;
//! use tower_model_balance::breaker::{CircuitBreakerLayer, BreakerConfig};
//! use tower_model_balance::classify::{GrpcErrorsAsFailures, StopPoint};
//!
//! let policy = BreakerConfig::builder().slow_call_duration(Duration::from_secs(2)).build().unwrap();
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
//! [`Classify`]: crate::classify::Classify
//! [`ServerErrorsAsFailures`]: crate::classify::ServerErrorsAsFailures
//! [`GrpcErrorsAsFailures`]: crate::classify::GrpcErrorsAsFailures

mod admission;
mod body;
mod config;
pub(crate) mod events;
pub mod future;
mod layer;
mod service;
mod shared;
mod state;
mod window;

pub use self::admission::WhenOpen;
pub use self::body::ResponseBody;
pub use self::config::{BreakerConfig, BreakerConfigBuilder, SlidingWindow};
pub use self::events::OnTransition;
pub use self::layer::CircuitBreakerLayer;
pub use self::service::CircuitBreaker;
pub use self::shared::handle::Breaker;
pub use self::shared::permit::Permit;
#[cfg(feature = "balance")]
pub(crate) use self::state::values::Ticket;
pub use self::state::values::{
    BreakerState, BreakerStats, Mode, Reason, Transition, TransitionCounts,
};
