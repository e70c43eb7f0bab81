//! What a call's result means for the backend that served it, decided apart
//! from the middleware that acts on it (in the manner of tower-http's
//! `classify`): one family for the circuit breaker, the hedge and the
//! balancer.
//!
//! ```
//! use tower_model_balance::classify::{
//!     Classified, Classifier, Classify, ClassifyEos, GrpcErrorsAsFailures, Outcome,
//!     ServerErrorsAsFailures,
//! };
//!
//! // HTTP (the default everywhere): 5xx fail, 429 is an overload, other
//! // 4xx are the caller's, the rest succeed.
//! let rsp = http::Response::builder().status(429).body(()).unwrap();
//! let c = Classify::<_, std::io::Error>::classify_response(&ServerErrorsAsFailures::new(), &rsp);
//! assert_eq!(c, Classified::Ready(Outcome::Overload));
//!
//! // gRPC: a 200 without `grpc-status` in its head waits for the trailers.
//! let rsp = http::Response::new(());
//! let Classified::AtEnd(eos) =
//!     Classify::<_, std::io::Error>::classify_response(&GrpcErrorsAsFailures::new(), &rsp)
//! else {
//!     unreachable!()
//! };
//! let mut trailers = http::HeaderMap::new();
//! trailers.insert("grpc-status", "14".parse().unwrap());
//! assert_eq!(eos.classify_eos(Some(&trailers)), Outcome::Failure);
//!
//! // The type-erased form the balancer's configuration holds: here a 404
//! // ("model not loaded") counts as a failure.
//! let classifier = Classifier::from_status(|status| match status.as_u16() {
//!     404 => Outcome::Failure,
//!     _ => ServerErrorsAsFailures::classify_status(status),
//! });
//! let rsp = http::Response::builder().status(404).body(()).unwrap();
//! let c = Classify::<_, std::io::Error>::classify_response(&classifier, &rsp);
//! assert!(matches!(c, Classified::Ready(Outcome::Failure)));
//! ```
//!
//! A [`Classify`] reads a response's head (status, headers) and either
//! decides at once ([`Classified::Ready`]) or defers to the end of the body
//! ([`Classified::AtEnd`], with a [`ClassifyEos`] that reads the trailers:
//! gRPC puts its status there). Errors — timeouts, connection errors — are
//! classified by [`Classify::classify_error`]. There are four
//! [`Outcome`]s: a success, a failure, an overload (429, gRPC
//! `RESOURCE_EXHAUSTED`: the backend is up but shedding) and an ignored
//! call (the caller's own 4xx).
//!
//! * [`ServerErrorsAsFailures`] (HTTP, the default) and
//!   [`GrpcErrorsAsFailures`] (gRPC) are the two classifiers given; a
//!   closure `Fn(Result<&T, &E>) -> Outcome` is a third;
//! * [`ColdLoad`] marks a classifier's cold model loads, which the breaker
//!   records untimed;
//! * [`Classifier`] erases the type (and the body type) of an HTTP
//!   classifier, for a configuration that is not generic.
//!
//! With the breaker (feature `breaker`, which the balancer turns on), the
//! outcome is recorded [`AtEndOfBody`] (a [`CompletionBody`]) or
//! [`AtResponse`] by one mechanism the breaker and the balancer share, and
//! the slow-call clock stops at a [`StopPoint`] for both.
//!
//! # Which name for what
//!
//! The names follow tower-http's `classify` (`ClassifyResponse`,
//! `ClassifyEos`, `ServerErrorsAsFailures`, `GrpcErrorsAsFailures`), one
//! per role:
//!
//! | Role | Name |
//! |---|---|
//! | the verdict on a call | [`Outcome`] (success, failure, overload, ignored) |
//! | a verdict now, or at the body's end | [`Classified`] (`Ready` / `AtEnd`) |
//! | a classifier of a response or an error, generic over its types | [`Classify`] (implement it, or pass a closure) |
//! | the verdict at the end of the body, from the trailers | [`ClassifyEos`] |
//! | the classifiers given | [`ServerErrorsAsFailures`] (HTTP), [`GrpcErrorsAsFailures`] (gRPC), with [`GrpcEosErrorsAsFailures`] their end-of-stream half |
//! | a classifier that reads only status and headers, for a config that is not generic | [`ClassifyHead`] (implement it), erased as [`Classifier`] with [`ClassifierEos`] |
//! | a classifier's cold model loads marked | [`ColdLoad`] |
//! | when the outcome is recorded | [`AtResponse`], or [`AtEndOfBody`] through a [`CompletionBody`] |
//! | when the slow-call clock stops | [`StopPoint`] |

mod cold;
mod erased;
mod grpc;
mod outcome;
mod record;
mod status;
mod traits;

#[cfg(feature = "breaker")]
pub(crate) mod body;
#[cfg(feature = "breaker")]
pub(crate) mod completion;
#[cfg(any(feature = "breaker", feature = "hedge"))]
pub(crate) mod sse;
#[cfg(feature = "breaker")]
pub(crate) mod timing;

#[cfg(feature = "breaker")]
pub use self::body::CompletionBody;
pub use self::cold::ColdLoad;
pub use self::erased::{Classifier, ClassifierEos, ClassifyHead};
pub use self::grpc::{GrpcEosErrorsAsFailures, GrpcErrorsAsFailures};
pub use self::outcome::Outcome;
pub use self::record::{AtEndOfBody, AtResponse};
pub use self::status::ServerErrorsAsFailures;
#[cfg(feature = "breaker")]
pub use self::timing::StopPoint;
pub use self::traits::{Classified, Classify, ClassifyEos};
