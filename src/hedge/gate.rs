//! The load gate: what the hedge asks before it adds load.

/// Reports how loaded the fleet behind a [`HedgeLayer`](super::HedgeLayer)
/// is; no hedge is sent while the utilization is above the policy's
/// [`max_utilization`](super::HedgeConfigBuilder::max_utilization).
///
/// Asked only when a hedge is about to be sent, never on a request that
/// does not hedge. Implemented for closures returning the utilization, and
/// (feature `balance`) by [`BalancerLoad`] over a balancer's handle.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::sync::Arc;
/// use tower_model_balance::hedge::LoadGate;
///
/// let in_flight = Arc::new(AtomicU64::new(30));
/// let seen = in_flight.clone();
/// let gate = move || seen.load(Ordering::Relaxed) as f64 / 32.0;
/// assert!((gate.utilization() - 0.9375).abs() < 1e-9);
/// ```
pub trait LoadGate: Send + Sync + 'static {
    /// In-flight requests ÷ the capacity that serves them: 1 is full;
    /// above 1 requests queue. A NaN counts as over any threshold: a gate
    /// that cannot tell suppresses hedges.
    fn utilization(&self) -> f64;
}

impl<F> LoadGate for F
where
    F: Fn() -> f64 + Send + Sync + 'static,
{
    fn utilization(&self) -> f64 {
        self()
    }
}

/// The load gate of a [`ModelBalancer`](crate::balance::ModelBalancer):
/// its requests in flight (sent and not finished, as
/// [`BalancerHandle::in_flight`](crate::balance::BalancerHandle::in_flight))
/// ÷ (`per_backend` × its current backends), where `per_backend` is how
/// many requests one backend serves at once (its serving slots or batch
/// size). Above 1 requests queue at the backends. One atomic read of the
/// fleet's count, from its handle.
#[cfg(feature = "balance")]
#[cfg_attr(docsrs, doc(cfg(feature = "balance")))]
#[derive(Debug, Clone)]
pub struct BalancerLoad {
    handle: crate::balance::BalancerHandle,
    per_backend: usize,
}

#[cfg(feature = "balance")]
impl BalancerLoad {
    /// Reads `handle`'s balancer, whose backends each serve `per_backend`
    /// requests at once (their serving slots or batch size; 0 counts as 1).
    pub fn new(handle: crate::balance::BalancerHandle, per_backend: usize) -> Self {
        Self {
            handle,
            per_backend: per_backend.max(1),
        }
    }
}

#[cfg(feature = "balance")]
impl LoadGate for BalancerLoad {
    fn utilization(&self) -> f64 {
        self.handle.utilization(self.per_backend)
    }
}
