//! What counts as a failure, decided apart from the breaker (in the manner of
//! tower-http's `classify`).
//!
//! A [`Classify`] reads a response's head (status, headers) and either
//! decides at once ([`Classified::Ready`]) or defers to the end of the body
//! ([`Classified::AtEnd`], with a [`ClassifyEos`] that reads the trailers:
//! gRPC puts its status there). Errors — timeouts, connection errors — are
//! classified by [`Classify::classify_error`].

use std::convert::Infallible;

use super::Outcome;

mod grpc;

pub use self::grpc::{GrpcEosErrorsAsFailures, GrpcErrorsAsFailures};

/// Classifies a call's result for a breaker: a response of type `T` or an
/// error of type `E`.
///
/// Implemented for closures `Fn(Result<&T, &E>) -> Outcome` (which decide
/// from the head alone), by [`ServerErrorsAsFailures`] for HTTP and by
/// [`GrpcErrorsAsFailures`] for gRPC. Object-safe: a classifier chosen at
/// run time may be held as `Arc<dyn Classify<T, E, Eos = X> + Send + Sync>`,
/// itself a (cloneable) classifier.
///
/// ```
/// use std::convert::Infallible;
/// use tower_model_balance::breaker::{Classified, Classify, Outcome};
///
/// // A closure: every error and every 5xx fails, the rest succeeds.
/// let five_xx = |r: Result<&http::Response<()>, &std::io::Error>| match r {
///     Ok(rsp) if !rsp.status().is_server_error() => Outcome::Success,
///     _ => Outcome::Failure,
/// };
/// let c: &dyn Classify<http::Response<()>, std::io::Error, Eos = Infallible> = &five_xx;
/// let rsp = http::Response::builder().status(502).body(()).unwrap();
/// assert!(matches!(c.classify_response(&rsp), Classified::Ready(Outcome::Failure)));
/// ```
pub trait Classify<T, E> {
    /// What decides a deferred outcome at the end of the body
    /// ([`Infallible`] for a classifier that never defers).
    type Eos: ClassifyEos;

    /// The outcome of a response from its head: ready now, or at the end
    /// of its body.
    fn classify_response(&self, response: &T) -> Classified<Self::Eos>;

    /// The outcome of a call that failed without a response: a timeout
    /// (tower's `Elapsed`), a connection refused or reset (`hyper`,
    /// `std::io` errors), an inner service's own error.
    fn classify_error(&self, error: &E) -> Outcome;

    /// Whether `response` is a cold model load (default: never): its call
    /// is recorded untimed, so that loading a model never counts as a slow
    /// call. See [`ColdLoad`].
    fn is_cold_load(&self, response: &T) -> bool {
        let _ = response;
        false
    }
}

/// A response's outcome, as its head decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Classified<Eos> {
    /// Decided by the head (the status, or gRPC's trailers-only status).
    Ready(Outcome),
    /// Decided at the end of the body by the `Eos` classifier, from the
    /// trailers (a gRPC 200 with its status still to come).
    AtEnd(Eos),
}

/// Decides a response's outcome at the end of its body.
///
/// A body that fails is a [`Outcome::Failure`] without asking; a body
/// dropped before its end (the caller hung up before the status came) is
/// [`Outcome::Ignored`], as gRPC's `CANCELLED` is.
pub trait ClassifyEos {
    /// The outcome from the body's trailers: `None` when it ended without
    /// any.
    fn classify_eos(self, trailers: Option<&http::HeaderMap>) -> Outcome;
}

impl ClassifyEos for Infallible {
    fn classify_eos(self, _: Option<&http::HeaderMap>) -> Outcome {
        match self {}
    }
}

impl<F, T, E> Classify<T, E> for F
where
    F: Fn(Result<&T, &E>) -> Outcome,
{
    type Eos = Infallible;

    fn classify_response(&self, response: &T) -> Classified<Infallible> {
        Classified::Ready(self(Ok(response)))
    }

    fn classify_error(&self, error: &E) -> Outcome {
        self(Err(error))
    }
}

impl<C, T, E> Classify<T, E> for std::sync::Arc<C>
where
    C: Classify<T, E> + ?Sized,
{
    type Eos = C::Eos;

    fn classify_response(&self, response: &T) -> Classified<C::Eos> {
        (**self).classify_response(response)
    }

    fn classify_error(&self, error: &E) -> Outcome {
        (**self).classify_error(error)
    }

    fn is_cold_load(&self, response: &T) -> bool {
        (**self).is_cold_load(response)
    }
}

// === impl ServerErrorsAsFailures ===

/// The default classifier for `http::Response`:
///
/// | response | outcome |
/// |---|---|
/// | 5xx | [`Outcome::Failure`] |
/// | 429 Too Many Requests | [`Outcome::Overload`]: a failure for the rate, not for the consecutive-failure trip |
/// | other 4xx | [`Outcome::Ignored`]: the caller's mistake says nothing about the backend (a half-open permit still comes back) |
/// | 1xx, 2xx, 3xx | [`Outcome::Success`] |
/// | any error (timeout, connection refused or reset) | [`Outcome::Failure`] |
///
/// The status decides from the head; the breaker still records the call
/// at the end of its body (a body error fails it).
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct ServerErrorsAsFailures;

impl ServerErrorsAsFailures {
    /// Creates the classifier.
    pub const fn new() -> Self {
        Self
    }

    /// The outcome for a status code alone.
    pub fn classify_status(status: http::StatusCode) -> Outcome {
        if status == http::StatusCode::TOO_MANY_REQUESTS {
            Outcome::Overload
        } else if status.is_server_error() {
            Outcome::Failure
        } else if status.is_client_error() {
            Outcome::Ignored
        } else {
            Outcome::Success
        }
    }
}

impl<B, E> Classify<http::Response<B>, E> for ServerErrorsAsFailures {
    type Eos = Infallible;

    fn classify_response(&self, response: &http::Response<B>) -> Classified<Infallible> {
        Classified::Ready(Self::classify_status(response.status()))
    }

    fn classify_error(&self, _: &E) -> Outcome {
        Outcome::Failure
    }
}

// === impl ColdLoad ===

/// A classifier that marks the responses `predicate` picks as cold model
/// loads, and otherwise classifies as `inner` does.
///
/// A cold load is recorded *untimed* (`elapsed: None` for
/// [`Permit::record_call`](super::Permit::record_call)): its outcome
/// counts, but loading a model never makes it a slow call. Built by
/// [`CircuitBreakerLayer::cold_load`](super::CircuitBreakerLayer::cold_load).
///
/// ```
/// use tower_model_balance::breaker::{Classify, ColdLoad, ServerErrorsAsFailures};
///
/// let c = ColdLoad::new(ServerErrorsAsFailures::new(), |rsp: &http::Response<()>| {
///     rsp.headers().contains_key("x-model-cold-load")
/// });
/// let cold = http::Response::builder().header("x-model-cold-load", "1").body(()).unwrap();
/// assert!(Classify::<_, std::io::Error>::is_cold_load(&c, &cold));
/// ```
#[derive(Clone, Copy)]
pub struct ColdLoad<C, P> {
    inner: C,
    predicate: P,
}

impl<C: std::fmt::Debug, P> std::fmt::Debug for ColdLoad<C, P> {
    /// The predicate, a closure as a rule, is not shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColdLoad")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<C, P> ColdLoad<C, P> {
    /// Classifies with `inner`; `predicate(&response)` says whether a
    /// response is a cold load.
    pub const fn new(inner: C, predicate: P) -> Self {
        Self { inner, predicate }
    }

    /// The wrapped classifier.
    pub fn get_ref(&self) -> &C {
        &self.inner
    }
}

impl<C, P, T, E> Classify<T, E> for ColdLoad<C, P>
where
    C: Classify<T, E>,
    P: Fn(&T) -> bool,
{
    type Eos = C::Eos;

    fn classify_response(&self, response: &T) -> Classified<C::Eos> {
        self.inner.classify_response(response)
    }

    fn classify_error(&self, error: &E) -> Outcome {
        self.inner.classify_error(error)
    }

    fn is_cold_load(&self, response: &T) -> bool {
        (self.predicate)(response) || self.inner.is_cold_load(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    #[test]
    fn a_shared_classifier_answers_as_the_one_it_shares() {
        type Rsp = http::Response<u16>;
        let cold = |r: &Rsp| *r.body() == 1;
        let shared = std::sync::Arc::new(ColdLoad::new(ServerErrorsAsFailures, cold));
        let is_cold =
            |body: u16| Classify::<Rsp, &str>::is_cold_load(&shared, &http::Response::new(body));
        assert!(is_cold(1), "a cold load through the Arc");
        assert!(!is_cold(0), "a warm answer through the Arc");
    }

    #[test]
    fn http_statuses() {
        let c = |code: u16| {
            ServerErrorsAsFailures::classify_status(StatusCode::from_u16(code).unwrap())
        };
        assert_eq!(c(200), Outcome::Success);
        assert_eq!(c(304), Outcome::Success);
        assert_eq!(c(404), Outcome::Ignored);
        assert_eq!(c(429), Outcome::Overload);
        assert_eq!(c(500), Outcome::Failure);
        assert_eq!(c(503), Outcome::Failure);
        let err =
            Classify::<http::Response<()>, &str>::classify_error(&ServerErrorsAsFailures, &"reset");
        assert_eq!(err, Outcome::Failure);
    }

    #[test]
    fn closures_classify_and_are_object_safe() {
        let always_ok = |_: Result<&u8, &()>| Outcome::Success;
        let dynamic: &dyn Classify<u8, (), Eos = Infallible> = &always_ok;
        assert_eq!(dynamic.classify_error(&()), Outcome::Success);
        assert!(!dynamic.is_cold_load(&0));
        let boxed: Box<dyn Classify<u8, (), Eos = Infallible>> =
            Box::new(ColdLoad::new(always_ok, |n: &u8| *n == 7));
        assert!(boxed.is_cold_load(&7));
        assert!(matches!(
            boxed.classify_response(&7),
            Classified::Ready(Outcome::Success)
        ));
    }
}
