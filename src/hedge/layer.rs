//! [`HedgeLayer`]: the hedge as a `Layer`, with its load gate, its
//! classifier and the retry policy that draws from the same budget.

use std::sync::Arc;

use tower_layer::Layer;

use super::config::HedgeConfig;
use super::gate::LoadGate;
use super::retry::RetryPolicy;
use super::service::Hedge;
use super::shared::{HedgeHandle, Shared};
use crate::classify::ServerErrorsAsFailures;

/// Wraps a service in [`Hedge`]; see the [module docs](super).
///
/// Every service the layer makes (and every clone of them) shares one set
/// of delays, one budget and one set of counters, read with
/// [`HedgeLayer::handle`].
#[derive(Debug, Clone)]
pub struct HedgeLayer<C = ServerErrorsAsFailures> {
    shared: Arc<Shared>,
    classify: C,
}

impl HedgeLayer {
    /// A layer hedging by `policy`, with no load gate.
    pub fn new(policy: HedgeConfig) -> Self {
        Self {
            shared: Arc::new(Shared::new(policy, None)),
            classify: ServerErrorsAsFailures,
        }
    }

    /// A layer hedging by `policy` that sends no hedge while `gate` reports
    /// a utilization above
    /// [`max_utilization`](super::HedgeConfigBuilder::max_utilization).
    pub fn with_load_gate(policy: HedgeConfig, gate: impl LoadGate) -> Self {
        Self {
            shared: Arc::new(Shared::new(policy, Some(Box::new(gate)))),
            classify: ServerErrorsAsFailures,
        }
    }
}

impl<C> HedgeLayer<C> {
    /// Decides which responses win the race with `classify` instead
    /// (default [`ServerErrorsAsFailures`]: 5xx fail, 429 is an overload,
    /// the rest — other 4xx included — are answers). Any
    /// [`Classify`](crate::classify::Classify) of the responses with
    /// [`BoxError`](crate::error::BoxError) errors: a response classified
    /// a success or ignored wins (as does one deferred to the end of its
    /// body); a failure waits for the other attempt, and sends the backup
    /// early when it comes before the delay; an overload waits for the
    /// other attempt too, but never sends a backup. Errors are always
    /// failures. A closure classifies responses of any type:
    ///
    /// ```
    /// use std::time::Duration;
    /// use tower_model_balance::classify::Outcome;
    /// use tower_model_balance::error::BoxError;
    /// use tower_model_balance::hedge::{HedgeLayer, HedgeConfig};
    ///
    /// let policy = HedgeConfig::builder().ceiling(Duration::from_secs(1)).build().unwrap();
    /// // Every answer wins; only errors fail.
    /// let layer = HedgeLayer::new(policy).classify(|_: Result<&u32, &BoxError>| Outcome::Success);
    /// # drop(layer);
    /// ```
    pub fn classify<C2>(self, classify: C2) -> HedgeLayer<C2> {
        HedgeLayer {
            shared: self.shared,
            classify,
        }
    }

    /// A handle on the layer's counters, delays and budget.
    pub fn handle(&self) -> HedgeHandle {
        HedgeHandle {
            shared: self.shared.clone(),
        }
    }

    /// A `tower::retry::Policy` whose retries draw from this layer's
    /// budget; the layer counts the requests (see [`RetryPolicy`]). From
    /// then on the layer puts a [`PickedSlot`](crate::backend::PickedSlot)
    /// in every request it can (not only those it may hedge), so that a
    /// `tower::retry::Retry` between it and the balancer sends a retry to
    /// another backend.
    pub fn retry_policy(&self) -> RetryPolicy {
        self.shared
            .retries
            .store(true, std::sync::atomic::Ordering::Relaxed);
        RetryPolicy::counted_elsewhere(self.shared.budget.clone())
    }
}

impl<S, C: Clone> Layer<S> for HedgeLayer<C> {
    type Service = Hedge<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        Hedge::from_shared(inner, self.shared.clone(), self.classify.clone())
    }
}
