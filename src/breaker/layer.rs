//! [`CircuitBreakerLayer`]: the breaker as a `Layer`, with its classifier,
//! stop point, cold-load reading, admission mode and transition hook.

use tower_layer::Layer;

use std::fmt;

use super::admission::WhenOpen;
use super::config::BreakerConfig;
use super::events::{Hook, OnTransition};
use super::service::CircuitBreaker;
use super::shared::handle::Breaker;
use crate::classify::timing::StopPoint;
use crate::classify::{AtEndOfBody, AtResponse, ColdLoad, ServerErrorsAsFailures};

/// Wraps a service in a [`CircuitBreaker`] with its own [`Breaker`], shared
/// by the clones of the wrapped service. `K` is when outcomes are recorded:
/// [`AtEndOfBody`] (the default) or [`AtResponse`]
/// ([`at_response`](Self::at_response)); see [`CircuitBreaker`]'s
/// requirements.
#[derive(Clone)]
pub struct CircuitBreakerLayer<C = ServerErrorsAsFailures, K = AtEndOfBody> {
    policy: BreakerConfig,
    classifier: C,
    when_open: WhenOpen,
    stop: StopPoint,
    hook: Option<Hook>,
    track: K,
}

impl<C: fmt::Debug, K: fmt::Debug> fmt::Debug for CircuitBreakerLayer<C, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreakerLayer")
            .field("policy", &self.policy)
            .field("classifier", &self.classifier)
            .field("when_open", &self.when_open)
            .field("stop", &self.stop)
            .field("hook", &self.hook.is_some())
            .field("track", &self.track)
            .finish()
    }
}

impl CircuitBreakerLayer {
    /// A layer with `policy`, the default HTTP classifier, failing fast.
    pub const fn new(policy: BreakerConfig) -> Self {
        Self {
            policy,
            classifier: ServerErrorsAsFailures,
            when_open: WhenOpen::FailFast,
            stop: StopPoint::FirstFrame,
            hook: None,
            track: AtEndOfBody,
        }
    }
}

impl<C, K> CircuitBreakerLayer<C, K> {
    /// Uses `classifier` to decide what counts as a failure (default
    /// [`ServerErrorsAsFailures`]; [`GrpcErrorsAsFailures`] for gRPC).
    /// Replaces a [`cold_load`](Self::cold_load) predicate set before.
    ///
    /// [`GrpcErrorsAsFailures`]: crate::classify::GrpcErrorsAsFailures
    pub fn classifier<C2>(self, classifier: C2) -> CircuitBreakerLayer<C2, K> {
        CircuitBreakerLayer {
            policy: self.policy,
            classifier,
            when_open: self.when_open,
            stop: self.stop,
            hook: self.hook,
            track: self.track,
        }
    }

    /// Records each call's outcome when its response arrives rather than
    /// at the end of its body: for a response of any type (an
    /// `http::Response<Bytes>`, a `reqwest::Response`, a non-HTTP reply),
    /// returned unchanged. See [`AtResponse`].
    pub fn at_response(self) -> CircuitBreakerLayer<C, AtResponse> {
        CircuitBreakerLayer {
            policy: self.policy,
            classifier: self.classifier,
            when_open: self.when_open,
            stop: self.stop,
            hook: self.hook,
            track: AtResponse::default(),
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
    /// use tower_model_balance::breaker::{CircuitBreakerLayer, BreakerConfig};
    ///
    /// let layer = CircuitBreakerLayer::new(BreakerConfig::default())
    ///     .cold_load(|rsp: &http::Response<hyper::body::Incoming>| {
    ///         rsp.headers().contains_key("x-model-cold-load")
    ///     });
    /// # drop(layer);
    /// ```
    pub fn cold_load<P>(self, predicate: P) -> CircuitBreakerLayer<ColdLoad<C, P>, K> {
        CircuitBreakerLayer {
            policy: self.policy,
            classifier: ColdLoad::new(self.classifier, predicate),
            when_open: self.when_open,
            stop: self.stop,
            hook: self.hook,
            track: self.track,
        }
    }

    /// Sets how callers are treated while the breaker does not admit
    /// (default [`WhenOpen::FailFast`]); [`WhenOpen::Backpressure`] under
    /// a balancer.
    pub fn when_open(self, when_open: WhenOpen) -> Self {
        Self { when_open, ..self }
    }

    /// Reports every transition of the breakers this layer makes to `hook`
    /// (one breaker per [`layer`](Layer::layer) call; see
    /// [`Breaker::with_hook`]).
    pub fn on_transition(self, hook: impl OnTransition) -> Self {
        Self {
            hook: Some(Hook::new(hook)),
            ..self
        }
    }
}

impl<S, C: Clone, K: Clone> Layer<S> for CircuitBreakerLayer<C, K> {
    type Service = CircuitBreaker<S, C, K>;

    fn layer(&self, inner: S) -> Self::Service {
        let breaker = Breaker::build(self.policy.clone(), None, self.hook.clone());
        CircuitBreaker::new(inner, breaker, self.classifier.clone())
            .with_when_open(self.when_open)
            .with_stop_point(self.stop)
            .with_track(self.track.clone())
    }
}
