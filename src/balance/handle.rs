//! Reading what the balancer knows, from outside the request path.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use tokio::time::Instant;

use crate::backend::BackendId;
use crate::balance::state::placement::{Owners, Placement, PlacementStats};
use crate::balance::state::shared::View;
use crate::balance::state::traffic::Branch;
use crate::balance::tasks::{self, placement};
use crate::breaker::{Breaker, BreakerState};
use crate::error::{BoxError, InvalidConfig};
use crate::health::probe::{ProbeConfig, ProbeError, ProbeReport, Prober};
use crate::health::HealthStatus;
use crate::placement::{ModelLoader, PlacementConfig};
use crate::route::ModelId;
use crate::task::BackgroundTask;

use crate::balance::stats::{BackendStatus, BalanceStats};

/// A cheap, cloneable handle on a balancer's counters and backends.
#[derive(Clone)]
pub struct BalancerHandle {
    view: Arc<dyn View>,
}

impl BalancerHandle {
    pub(crate) fn new(view: Arc<dyn View>) -> Self {
        Self { view }
    }

    /// The counters since the balancer was built, and the pairs tracked
    /// now (see [`BalanceStats`]). Reads every backend's counters, and
    /// takes the pair map's lock in `BackendModel` scope.
    pub fn stats(&self) -> BalanceStats {
        let c = self.view.counters();
        let read = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let table = self.view.table();
        let picked = |branch| table.fleet.gauges.traffic.picked(branch);
        BalanceStats {
            resident_owner: picked(Branch::ResidentOwner),
            cold_owner: picked(Branch::ColdOwner),
            spill: picked(Branch::Spill),
            panic: picked(Branch::Panic),
            cached_blocks: picked(Branch::CachedBlocks),
            update: picked(Branch::Update),
            no_backend: read(&c.no_backend),
            invalid_route: read(&c.invalid_route),
            shed_normal: read(&c.shed[0]),
            shed_high: read(&c.shed[1]),
            shed_critical: read(&c.shed[2]),
            queued: table.fleet.queue.entered() as u64,
            queue_peak: table.fleet.queue.peak() as u64,
            ejections: table
                .backends
                .iter()
                .map(|b| b.health.ejections.load(Ordering::Relaxed))
                .sum(),
            breaker_trips: table.backends.iter().map(|b| b.breaker.trips()).sum(),
            pair_breaker_trips: table.fleet.scoped.as_ref().map_or(0, |p| p.trips()),
            tracked_pairs: table.fleet.scoped.as_ref().map_or(0, |p| p.len()),
            ignored_backends: table.fleet.gauges.ignored.load(Ordering::Relaxed),
        }
    }

    /// Requests waiting for room under admission now.
    pub fn queue_len(&self) -> usize {
        self.view.table().fleet.queue.len()
    }

    /// Each backend's admission limit now, in discovery order (`usize::MAX`
    /// without admission): fixed, or where an adaptive limit has got to.
    pub fn admission_limits(&self) -> Vec<(BackendId, usize)> {
        let table = self.view.table();
        table
            .backends
            .iter()
            .map(|b| (b.id.clone(), b.limit.get()))
            .collect()
    }

    /// The current backends, in discovery order.
    pub fn backends(&self) -> Vec<BackendStatus> {
        let table = self.view.table();
        table
            .backends
            .iter()
            .map(|b| BackendStatus::of(b, &table.fleet.settings.health))
            .collect()
    }

    /// Requests in flight over all current backends.
    pub fn in_flight(&self) -> usize {
        self.view.table().backends.iter().map(|b| b.load()).sum()
    }

    /// The fleet's utilization: requests in flight ÷ (`per_backend` ×
    /// current backends); with no backend or `per_backend` 0 the capacity
    /// counts as 1. One atomic read of the fleet's count; what
    /// [`BalancerLoad`](crate::hedge::BalancerLoad) reads.
    #[cfg(feature = "hedge")]
    pub(crate) fn utilization(&self, per_backend: usize) -> f64 {
        let table = self.view.table();
        let capacity = per_backend.saturating_mul(table.backends.len()).max(1);
        table.fleet_load() as f64 / capacity as f64
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

    /// Takes one probe's answer for `backend` (from a
    /// [`Prober`](crate::health::probe::Prober) or the caller's own
    /// telemetry): a failure, or an answer of not ready (unless the report
    /// says the server is [`loading`](crate::health::probe::ProbeReport::loading)
    /// a model: busy, not sick), counts against its health like a failed
    /// request; load signals feed its capacity term
    /// until three evaluation intervals old; resident models, when listed,
    /// are the server's own list (its first `model_slots` models: see
    /// [`BackendMeta::with_model_slots`](crate::backend::BackendMeta::with_model_slots),
    /// set it to what the server holds): those listed are resident and served,
    /// those the balancer took as served but not listed are dropped
    /// (evicted), those it sent there that may still be loading are kept.
    /// Scores change at the next evaluation. Returns false when no current
    /// backend has that ID.
    pub fn report_probe(
        &self,
        backend: &BackendId,
        answer: Result<&ProbeReport, &ProbeError>,
    ) -> bool {
        crate::balance::tasks::probes::record(&self.view.table(), backend, answer)
    }

    /// Starts probing this balancer's backends with `prober`, in a task on
    /// the current Tokio runtime: every backend whose metadata has an
    /// [`address`](crate::backend::BackendMeta::with_address) is probed once a round
    /// (rounds `config.interval` apart, jittered, at most
    /// `config.concurrency` probes at once, each failed after
    /// `config.timeout`), and each answer taken as by
    /// [`BalancerHandle::report_probe`]. A backend joining is probed from
    /// the next round on. The task stops when the returned [`BackgroundTask`]
    /// is dropped or once every clone and handle of the balancer is gone.
    ///
    /// # Errors
    ///
    /// [`NoRuntime`](crate::error::NoRuntime) outside a Tokio runtime
    /// (nothing is started).
    pub fn spawn_probes<P: Prober>(
        &self,
        prober: P,
        config: ProbeConfig,
    ) -> Result<BackgroundTask, crate::error::NoRuntime> {
        let runtime = crate::error::NoRuntime::current()?;
        Ok(crate::balance::tasks::probes::spawn(
            &runtime, &self.view, prober, config,
        ))
    }

    /// Turns on-demand [placement](crate::placement) on: from now on, an
    /// inference request routed to a backend where its model is not known
    /// to be served waits while `loader` loads it there (one load per
    /// (backend, model), shared), as `policy` says. Also starts a task on
    /// the current Tokio runtime that re-reads every backend's repository
    /// (the allow-list of loads) each `policy.repository_interval()`; it
    /// stops when the returned [`BackgroundTask`] is dropped (loads already
    /// started still finish) or the balancer is gone. Every backend needs
    /// an [`address`](crate::backend::BackendMeta::with_address); a backend without
    /// one fails its loads.
    ///
    /// # Errors
    ///
    /// [`NoRuntime`](crate::error::NoRuntime) when called outside a Tokio
    /// runtime; [`InvalidConfig`] naming `placement` when placement is on
    /// already (once per balancer). Nothing is started.
    pub fn enable_placement<L: ModelLoader>(
        &self,
        loader: L,
        policy: PlacementConfig,
    ) -> Result<BackgroundTask, BoxError> {
        let runtime = crate::error::NoRuntime::current()?;
        let table = self.view.table();
        let placement = Arc::new(Placement::new(
            loader,
            policy,
            runtime,
            Arc::downgrade(&self.view) as Weak<dyn Owners>,
        ));
        table
            .fleet
            .placement
            .set(placement.clone())
            .map_err(|_| InvalidConfig::new("placement", "enabled at most once per balancer"))?;
        let refresh = placement::refresh(
            placement.clone(),
            Arc::downgrade(&self.view),
            self.view.gone(),
        );
        Ok(tasks::spawn_held(&placement.runtime, refresh))
    }

    /// Placement's counters, once [enabled](Self::enable_placement).
    pub fn placement_stats(&self) -> Option<PlacementStats> {
        let table = self.view.table();
        let placement = table.fleet.placement.get()?;
        Some(placement.stats())
    }

    /// `model`'s owners now, as a pick walks and counts them: those the
    /// last owner plan gave it (the first backends of its ring walk with a
    /// model slot left, as many as the plan sized it for; see the
    /// [module docs](crate::balance)), else the first `k` distinct
    /// backends of its walk, `k` as demand has set it (or as configured for
    /// the model). Between two plans (250 ms) demand may already ask for
    /// another count; the picks, and this, keep the plan's until the next.
    /// Empty with no backends.
    pub fn owners(&self, model: &ModelId) -> Vec<BackendId> {
        let table = self.view.table();
        self.view
            .owners(&table, model.hash64())
            .map(|i| table.backends[i].id.clone())
            .collect()
    }

    /// Whether the balancer takes `model` to be resident on `backend`.
    pub fn is_resident(&self, backend: &BackendId, model: &ModelId) -> bool {
        let table = self.view.table();
        let state = table.backends.iter().find(|b| &b.id == backend);
        state.is_some_and(|b| b.residency.contains(model.hash64()))
    }

    /// `backend`'s health as last evaluated (every
    /// [`HealthConfigBuilder::interval`](crate::health::HealthConfigBuilder::interval)):
    /// its score, the weight P2C divides its cost by, whether it is
    /// ejected and why, and the terms. `None` when no current backend has
    /// that ID.
    pub fn health(&self, backend: &BackendId) -> Option<HealthStatus> {
        let table = self.view.table();
        let state = table.backends.iter().find(|b| &b.id == backend)?;
        Some(state.health.status(&table.fleet.settings.health))
    }

    /// The state of the breaker that admits `model`'s requests to
    /// `backend`: the backend's in [`BreakerScope::Backend`], the pair's in
    /// [`BreakerScope::BackendModel`] (`Closed` for a pair not tracked, as
    /// its next request would find it). `None` when no current backend has
    /// that ID. Takes the pair map's lock in `BackendModel` scope.
    ///
    /// [`BreakerScope::Backend`]: crate::balance::BreakerScope::Backend
    /// [`BreakerScope::BackendModel`]: crate::balance::BreakerScope::BackendModel
    pub fn breaker_state(&self, backend: &BackendId, model: &ModelId) -> Option<BreakerState> {
        let table = self.view.table();
        let state = table.backends.iter().find(|b| &b.id == backend)?;
        let now = Instant::now();
        Some(match &table.fleet.scoped {
            None => state.breaker.read_state(now),
            Some(pairs) => pairs.state(state.uid, model.hash64(), now),
        })
    }

    /// The breaker of `backend` (its backend-level breaker: the one that
    /// admits its requests in [`BreakerScope::Backend`], the default), to
    /// read its [`stats`](Breaker::stats) or run it by hand —
    /// [`set_mode`](Breaker::set_mode)`(`[`Mode::ForcedOpen`](crate::breaker::Mode::ForcedOpen)`)` to drain a
    /// backend, [`reset`](Breaker::reset).
    /// The same state machine the balancer's picks consult: a forced-open
    /// backend is skipped at once, in panic mode too and in either breaker
    /// scope (drained on purpose). `None` when no current backend has that
    /// ID.
    ///
    /// [`BreakerScope::Backend`]: crate::balance::BreakerScope::Backend
    pub fn breaker(&self, backend: &BackendId) -> Option<Breaker> {
        let table = self.view.table();
        let state = table.backends.iter().find(|b| &b.id == backend)?;
        Some(state.breaker.clone())
    }
}

impl fmt::Debug for BalancerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BalancerHandle")
            .field("stats", &self.stats())
            .finish()
    }
}
