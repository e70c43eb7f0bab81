use tower_layer::Layer;

use super::{Breaker, CircuitBreaker, ColdLoad, Policy, ServerErrorsAsFailures, StopPoint};

/// Wraps a service in a [`CircuitBreaker`] with its own [`Breaker`], shared
/// by the clones of the wrapped service.
#[derive(Debug, Clone)]
pub struct CircuitBreakerLayer<C = ServerErrorsAsFailures> {
    policy: Policy,
    classifier: C,
    stop: StopPoint,
}

impl CircuitBreakerLayer {
    /// A layer with `policy` and the default HTTP classifier.
    pub const fn new(policy: Policy) -> Self {
        Self {
            policy,
            classifier: ServerErrorsAsFailures,
            stop: StopPoint::FirstFrame,
        }
    }
}

impl<C> CircuitBreakerLayer<C> {
    /// Uses `classifier` to decide what counts as a failure (default
    /// [`ServerErrorsAsFailures`]; [`GrpcErrorsAsFailures`] for gRPC).
    /// Replaces a [`cold_load`](Self::cold_load) predicate set before.
    ///
    /// [`GrpcErrorsAsFailures`]: super::GrpcErrorsAsFailures
    pub fn classifier<C2>(self, classifier: C2) -> CircuitBreakerLayer<C2> {
        CircuitBreakerLayer {
            policy: self.policy,
            classifier,
            stop: self.stop,
        }
    }

    /// Where the slow-call clock stops (default
    /// [`StopPoint::FirstFrame`]); it starts at admission.
    pub fn stop_point(mut self, stop: StopPoint) -> Self {
        self.stop = stop;
        self
    }

    /// Marks the responses `predicate` picks as cold model loads: recorded
    /// untimed, so that loading a model never counts as a slow call (their
    /// outcome still counts). Wraps the classifier set so far in
    /// [`ColdLoad`], so call it after [`classifier`](Self::classifier).
    ///
    /// ```
    /// use tower_model_balance::breaker::{CircuitBreakerLayer, Policy};
    ///
    /// let layer = CircuitBreakerLayer::new(Policy::default())
    ///     .cold_load(|rsp: &http::Response<hyper::body::Incoming>| {
    ///         rsp.headers().contains_key("x-model-cold-load")
    ///     });
    /// # drop(layer);
    /// ```
    pub fn cold_load<P>(self, predicate: P) -> CircuitBreakerLayer<ColdLoad<C, P>> {
        CircuitBreakerLayer {
            policy: self.policy,
            classifier: ColdLoad::new(self.classifier, predicate),
            stop: self.stop,
        }
    }
}

impl<S, C: Clone> Layer<S> for CircuitBreakerLayer<C> {
    type Service = CircuitBreaker<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        CircuitBreaker::new(
            inner,
            Breaker::new(self.policy.clone()),
            self.classifier.clone(),
        )
        .with_stop_point(self.stop)
    }
}
