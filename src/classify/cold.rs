//! A classifier's cold model loads.

use super::outcome::Outcome;
use super::traits::{Classified, Classify};

/// A classifier that marks the responses `predicate` picks as cold model
/// loads, and otherwise classifies as `inner` does.
///
/// A cold load is recorded *untimed* (without the call's duration): its
/// outcome counts, but loading a model never makes it a slow call. Built by
/// [`CircuitBreakerLayer::cold_load`](crate::breaker::CircuitBreakerLayer::cold_load).
///
/// ```
/// use tower_model_balance::classify::{Classify, ColdLoad, ServerErrorsAsFailures};
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
