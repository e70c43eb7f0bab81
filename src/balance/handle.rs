//! Reading what the balancer knows, from outside the request path.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::pick::Branch;
use super::table::Table;
use tokio::time::Instant;

use crate::backend::BackendId;
use crate::breaker::{Breaker, BreakerState};
use crate::route::ModelId;

/// The requests that reached no backend; those picked are counted by
/// branch in the fleet's traffic.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) no_backend: AtomicU64,
    pub(crate) invalid_route: AtomicU64,
}

/// What the handle reads from the balancer's shared state, whatever its
/// endpoint type.
pub(crate) trait View: Send + Sync {
    fn table(&self) -> Arc<Table>;
    fn counters(&self) -> &Counters;
}

/// Requests counted by the branch the balancer took, since it was built.
/// Every request lands in exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct BalanceStats {
    /// Inference requests sent to an owner of their model where the model
    /// was resident (as far as the balancer knew).
    pub resident_owner: u64,
    /// Inference requests sent to an owner that had to load the model.
    pub cold_owner: u64,
    /// Inference requests spilled past every owner along the ring.
    pub spill: u64,
    /// Requests routed in panic mode (too few eligible backends), over
    /// every backend.
    pub panic: u64,
    /// Update requests sent by P2C.
    pub update: u64,
    /// Requests failed fast with `NoHealthyBackend`.
    pub no_backend: u64,
    /// Requests failed fast with `InvalidRoute`.
    pub invalid_route: u64,
}

/// One backend as the balancer sees it now.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackendStatus {
    /// The backend.
    pub id: BackendId,
    /// Requests sent and not yet finished (end of response body); counted
    /// up to 2^24 − 1 (about 16.7 million) at once.
    pub in_flight: usize,
    /// Its backend-level breaker's state. In
    /// [`BreakerScope::BackendModel`](super::BreakerScope::BackendModel)
    /// that breaker takes no traffic and stays closed: read the pairs with
    /// [`BalancerHandle::breaker_state`].
    pub breaker: BreakerState,
    /// Times its backend-level breaker opened.
    pub breaker_trips: u64,
    /// Requests sent to it since it joined (a counter that wraps after
    /// 2^40, about a trillion).
    pub picked: u64,
}

/// A cheap, cloneable handle on a balancer's counters and backends.
#[derive(Clone)]
pub struct BalancerHandle {
    view: Arc<dyn View>,
}

impl BalancerHandle {
    pub(crate) fn new(view: Arc<dyn View>) -> Self {
        Self { view }
    }

    /// Counters by branch.
    pub fn stats(&self) -> BalanceStats {
        let c = self.view.counters();
        let read = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let table = self.view.table();
        let picked = |branch| table.fleet.traffic.picked(branch);
        BalanceStats {
            resident_owner: picked(Branch::ResidentOwner),
            cold_owner: picked(Branch::ColdOwner),
            spill: picked(Branch::Spill),
            panic: picked(Branch::Panic),
            update: picked(Branch::Update),
            no_backend: read(&c.no_backend),
            invalid_route: read(&c.invalid_route),
        }
    }

    /// The current backends, in discovery order.
    pub fn backends(&self) -> Vec<BackendStatus> {
        self.view
            .table()
            .backends
            .iter()
            .map(|b| BackendStatus {
                id: b.id.clone(),
                in_flight: b.load(),
                breaker: b.breaker.state(),
                breaker_trips: b.breaker.trips(),
                picked: b.traffic.picked(),
            })
            .collect()
    }

    /// Requests in flight over all current backends.
    pub fn in_flight(&self) -> usize {
        self.view.table().backends.iter().map(|b| b.load()).sum()
    }

    /// Declares the models resident on `backend` now (e.g. from a probe of
    /// its model repository), replacing what the balancer had learned;
    /// beyond the backend's `model_slots`, later models are ignored.
    /// Returns false when no current backend has that ID.
    pub fn set_resident_models<'a>(
        &self,
        backend: &BackendId,
        models: impl IntoIterator<Item = &'a ModelId>,
    ) -> bool {
        let table = self.view.table();
        let Some(state) = table.backends.iter().find(|b| &b.id == backend) else {
            return false;
        };
        let now = table.fleet.millis(Instant::now());
        state
            .residency
            .replace(models.into_iter().map(ModelId::hash64), now);
        true
    }

    /// Whether the balancer takes `model` to be resident on `backend`.
    pub fn is_resident(&self, backend: &BackendId, model: &ModelId) -> bool {
        let table = self.view.table();
        let state = table.backends.iter().find(|b| &b.id == backend);
        state.is_some_and(|b| b.residency.contains(model.hash64()))
    }

    /// Sets `backend`'s health score, in [0, 1] (clamped; NaN reads as 0).
    /// P2C divides its cost by the score (floored at 0.05). Returns false
    /// when no current backend has that ID.
    pub fn set_health(&self, backend: &BackendId, score: f64) -> bool {
        let table = self.view.table();
        let state = table.backends.iter().find(|b| &b.id == backend);
        state.map(|b| b.health.set(score)).is_some()
    }

    /// The state of the breaker that admits `model`'s requests to
    /// `backend`: the backend's in [`BreakerScope::Backend`], the pair's in
    /// [`BreakerScope::BackendModel`] (`Closed` for a pair not tracked, as
    /// its next request would find it). `None` when no current backend has
    /// that ID. Takes the pair map's lock in `BackendModel` scope.
    ///
    /// [`BreakerScope::Backend`]: super::BreakerScope::Backend
    /// [`BreakerScope::BackendModel`]: super::BreakerScope::BackendModel
    pub fn breaker_state(&self, backend: &BackendId, model: &ModelId) -> Option<BreakerState> {
        let table = self.view.table();
        let state = table.backends.iter().find(|b| &b.id == backend)?;
        let now = Instant::now();
        Some(match &table.fleet.scoped {
            None => state.breaker.state_at(now),
            Some(pairs) => pairs.state(state.uid, model.hash64(), now),
        })
    }

    /// The breaker of `backend` (its backend-level breaker: the one that
    /// admits its requests in [`BreakerScope::Backend`], the default), to
    /// read its [`metrics`](Breaker::metrics) or run it by hand —
    /// [`force_open`](Breaker::force_open) to drain a backend,
    /// [`force_closed`](Breaker::force_closed), [`disable`](Breaker::disable),
    /// [`metrics_only`](Breaker::metrics_only), [`reset`](Breaker::reset).
    /// The same state machine the balancer's picks consult: a forced-open
    /// backend is skipped at once, in panic mode too and in either breaker
    /// scope (drained on purpose). `None` when no current backend has that
    /// ID.
    ///
    /// [`BreakerScope::Backend`]: super::BreakerScope::Backend
    pub fn breaker(&self, backend: &BackendId) -> Option<Breaker> {
        let table = self.view.table();
        let state = table.backends.iter().find(|b| &b.id == backend)?;
        Some(state.breaker.clone())
    }

    /// The (backend, model) pairs whose breakers are tracked now, at most
    /// `max_pairs`; 0 in [`BreakerScope::Backend`](super::BreakerScope::Backend).
    /// Takes the pair map's lock in `BackendModel` scope.
    pub fn tracked_pairs(&self) -> usize {
        self.view
            .table()
            .fleet
            .scoped
            .as_ref()
            .map_or(0, |p| p.len())
    }

    /// Inserts from discovery the balancer ignored since it was built (each
    /// also logged as a `tracing` warning): an ID already in use under
    /// another key, or a backend that would take the ring past
    /// [`MAX_POINTS`](crate::ring::MAX_POINTS) points.
    pub fn ignored_backends(&self) -> u64 {
        self.view.table().fleet.ignored.load(Ordering::Relaxed)
    }

    /// Breaker trips over all current backends (their backend-level
    /// breakers; pair breakers are not counted).
    pub fn breaker_trips(&self) -> u64 {
        self.view
            .table()
            .backends
            .iter()
            .map(|b| b.breaker.trips())
            .sum()
    }
}

impl fmt::Debug for BalancerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BalancerHandle")
            .field("stats", &self.stats())
            .finish()
    }
}
