use tower_layer::Layer;

use super::{Admission, Breaker, CircuitBreaker, Policy, ServerErrorsAsFailures};

/// Wraps a service in a [`CircuitBreaker`] with its own [`Breaker`], shared
/// by the clones of the wrapped service.
#[derive(Debug, Clone)]
pub struct CircuitBreakerLayer<C = ServerErrorsAsFailures> {
    policy: Policy,
    classifier: C,
    admission: Admission,
}

impl CircuitBreakerLayer {
    /// A layer with `policy`, the default HTTP classifier, failing fast.
    pub const fn new(policy: Policy) -> Self {
        Self {
            policy,
            classifier: ServerErrorsAsFailures,
            admission: Admission::FailFast,
        }
    }
}

impl<C> CircuitBreakerLayer<C> {
    /// Uses `classifier` to decide what counts as a failure.
    pub fn classifier<C2>(self, classifier: C2) -> CircuitBreakerLayer<C2> {
        CircuitBreakerLayer {
            policy: self.policy,
            classifier,
            admission: self.admission,
        }
    }

    /// Sets how callers are treated while the breaker does not admit
    /// (default [`Admission::FailFast`]); [`Admission::Backpressure`] under
    /// a balancer.
    pub fn admission(self, admission: Admission) -> Self {
        Self { admission, ..self }
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
        .with_admission(self.admission)
    }
}
