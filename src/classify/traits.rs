//! The classifier's traits: [`Classify`] decides a call's outcome from
//! its result (or defers it to the end of the body, as [`Classified`]
//! says), and [`ClassifyEos`] decides it there.

use std::convert::Infallible;

use super::outcome::Outcome;

/// Classifies a call's result: a response of type `T` or an error of type
/// `E`. The breaker counts by it, the hedge lets only a success (or an
/// ignored answer) win a race by it, and the balancer's
/// [`Classifier`](super::Classifier) is its type-erased form.
///
/// Implemented for closures `Fn(Result<&T, &E>) -> Outcome` (which decide
/// from the head alone), by
/// [`ServerErrorsAsFailures`](super::ServerErrorsAsFailures) for HTTP and
/// by [`GrpcErrorsAsFailures`](super::GrpcErrorsAsFailures) for gRPC.
/// Object-safe: a classifier chosen at run time may be held as
/// `Arc<dyn Classify<T, E, Eos = X> + Send + Sync>`,
/// itself a (cloneable) classifier.
///
/// ```
/// use std::convert::Infallible;
/// use tower_model_balance::classify::{Classified, Classify, Outcome};
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
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot classify a `{T}` (or the error `{E}`)",
    label = "not a classifier of this response and error",
    note = "`ServerErrorsAsFailures`, `GrpcErrorsAsFailures` and `Classifier` classify `http::Response<B>`; for another response type give a closure `Fn(Result<&{T}, &{E}>) -> Outcome`"
)]
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
    /// call (the breaker's; the hedge and the balancer do not ask). See
    /// [`ColdLoad`](super::ColdLoad).
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

impl<Eos> Classified<Eos> {
    /// The same verdict, its end-of-body classifier (if deferred) mapped
    /// by `f`.
    pub fn map_eos<T>(self, f: impl FnOnce(Eos) -> T) -> Classified<T> {
        match self {
            Self::Ready(outcome) => Classified::Ready(outcome),
            Self::AtEnd(eos) => Classified::AtEnd(f(eos)),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::{ColdLoad, ServerErrorsAsFailures};
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
