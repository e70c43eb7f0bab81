//! Backend health inside the balancer: outcomes recorded without a lock on
//! the request path, and the verdicts the picks read as atomics. The
//! [health task](crate::balance::tasks::health) folds them into scores
//! every evaluation interval.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::BackendId;
use crate::backend::BackendMeta;
use crate::balance::state::cost::Weight;
use crate::classify::Outcome;
use crate::endpoint::Origin;
use crate::health::probe::ProbeTarget;
use crate::health::{HealthConfig, HealthState, HealthStatus, LatencyHistogram, LoadSignals};

/// Whether a new backend's weight ramps up over the warm-up time (see
/// [`HealthConfigBuilder::warm_up`](crate::health::HealthConfigBuilder::warm_up)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WarmUp {
    /// It joins a fleet already routing: it ramps up.
    Ramp,
    /// It is among the first backends: full weight at once.
    None,
}

/// One backend's health: what the request path records, and the verdict
/// it reads.
#[derive(Debug)]
pub(crate) struct BackendHealth {
    /// The health score P2C divides the cost by.
    pub(crate) score: Weight,
    /// The warm-up ramp (slow start) P2C divides the requests in flight
    /// by: from `warm_up_min_weight` to 1 over the warm-up of a backend
    /// that joined a running fleet, else 1.
    pub(crate) ramp: Weight,
    /// Back from unhealthy (readmitted, or no longer held by the ejection
    /// cap) and not picked since: its next sample in a P2C pair takes the
    /// request (see [`Ctx::first`](crate::balance::choose::ctx::Ctx::first)).
    pub(crate) trial: AtomicBool,
    /// Out of the eligible set (by score or as a latency outlier).
    pub(crate) ejected: AtomicBool,
    /// Asked to be ejected and kept in by the ejection cap: eligible, but
    /// unhealthy for the panic threshold.
    pub(crate) held: AtomicBool,
    /// Times it was ejected.
    pub(crate) ejections: AtomicU64,
    /// Failed requests since the last evaluation.
    pub(crate) failures: AtomicU64,
    /// Failed requests since it joined.
    pub(crate) failed: AtomicU64,
    /// Whether any answer came since the last evaluation: a response head
    /// or an outcome of any kind (a backend with requests in flight and
    /// none is silent). A flag, not a count: the silence rule asks only
    /// whether any came, and a flag set once costs the requests after the
    /// first a load, where a count cost each a read-modify-write on a
    /// line every core serving the backend writes.
    pub(crate) answered: AtomicBool,
    /// Timed requests' latencies since the last evaluation (failures at
    /// the penalty).
    pub(crate) latencies: LatencyHistogram,
    pub(crate) inner: Mutex<Inner>,
}

/// What only the evaluation and probe reports touch.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) state: HealthState,
    /// Requests picked here at the last evaluation, and in flight then:
    /// their change is the requests finished.
    pub(crate) picked: u64,
    pub(crate) in_flight: usize,
    pub(crate) probes: u64,
    pub(crate) probe_failures: u64,
    pub(crate) load: Option<(LoadSignals, Instant)>,
    pub(crate) address: Option<Origin>,
    pub(crate) metrics_address: Option<Origin>,
    pub(crate) gpu_memory_bytes: Option<u64>,
}

impl BackendHealth {
    /// A backend with no data; `warming` when it joins a running fleet.
    pub(crate) fn new(policy: &HealthConfig, warm_up: WarmUp) -> Self {
        let state = HealthState::new(warm_up == WarmUp::Ramp);
        let (score, ramp) = (Weight::new(), Weight::new());
        score.set(state.score());
        ramp.set(state.ramp(policy));
        Self {
            score,
            ramp,
            trial: AtomicBool::new(false),
            ejected: AtomicBool::new(false),
            held: AtomicBool::new(false),
            ejections: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            answered: AtomicBool::new(false),
            latencies: LatencyHistogram::new(),
            inner: Mutex::new(Inner {
                state,
                picked: 0,
                in_flight: 0,
                probes: 0,
                probe_failures: 0,
                load: None,
                address: None,
                metrics_address: None,
                gpu_memory_bytes: None,
            }),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn is_ejected(&self) -> bool {
        self.ejected.load(Ordering::Relaxed)
    }

    /// Whether it is back from unhealthy and not picked since.
    #[inline]
    pub(crate) fn on_trial(&self) -> bool {
        self.trial.load(Ordering::Relaxed)
    }

    /// Ends its trial after a readmission, if it is on one (a store only
    /// then: the picks call it on every admission).
    #[inline]
    pub(crate) fn end_trial(&self) {
        if self.on_trial() {
            self.trial.store(false, Ordering::Relaxed);
        }
    }

    /// Whether only the ejection cap keeps it in (see
    /// [`HealthStatus::held_by_cap`]).
    pub(crate) fn is_held(&self) -> bool {
        self.held.load(Ordering::Relaxed)
    }

    /// Records a sign of life: a response head, or an outcome. A store
    /// only for the first since the last evaluation.
    #[inline]
    pub(crate) fn answered(&self) {
        if !self.answered.load(Ordering::Relaxed) {
            self.answered.store(true, Ordering::Relaxed);
        }
    }

    /// Records a finished request's `outcome` — a failure (or an
    /// overload) is always counted, for the error rate — and its
    /// `latency` when it was timed. Only timed requests enter the latency
    /// histogram, a failure at `penalty` at least: successes and failures
    /// are timed at the same rate, so a sample of the requests does not
    /// make failures look more common than they are.
    pub(crate) fn record(&self, latency: Option<Duration>, outcome: Outcome, penalty: Duration) {
        let failed = matches!(outcome, Outcome::Failure | Outcome::Overload);
        if failed {
            self.failures.fetch_add(1, Ordering::Relaxed);
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(latency) = latency {
            let latency = if failed {
                latency.max(penalty)
            } else {
                latency
            };
            self.latencies.record(latency);
        }
    }

    /// Records a probe's answer: [`Outcome::Failure`] when it failed or
    /// said not ready; `load` when it read load signals.
    pub(crate) fn record_probe(&self, outcome: Outcome, load: Option<LoadSignals>, now: Instant) {
        let mut inner = self.lock();
        inner.probes += 1;
        inner.probe_failures += u64::from(outcome == Outcome::Failure);
        if let Some(load) = load.filter(|l| !l.is_empty()) {
            inner.load = Some((load, now));
        }
    }

    /// Sets what discovery said of the backend.
    pub(crate) fn set_meta(&self, meta: &BackendMeta) {
        let mut inner = self.lock();
        inner.address = meta.address.clone();
        inner.metrics_address = meta.metrics_address.clone();
        inner.gpu_memory_bytes = meta.gpu_memory_bytes;
    }

    pub(crate) fn address(&self) -> Option<Origin> {
        self.lock().address.clone()
    }

    /// Where probes reach the backend, if it has an address.
    pub(crate) fn probe_target(&self, id: &BackendId) -> Option<ProbeTarget> {
        let inner = self.lock();
        let target = ProbeTarget::new(id.clone(), inner.address.clone()?);
        Some(match &inner.metrics_address {
            Some(metrics) => target.with_metrics_address(metrics.clone()),
            None => target,
        })
    }

    /// Whether the backend's GPU memory is at least `full` (a fraction)
    /// used, by its load signals of at most `max_age` ago: the bytes used
    /// over the budget discovery gave, else over the total it reported.
    /// False without such signals.
    pub(crate) fn memory_full(&self, full: f64, max_age: Duration, now: Instant) -> bool {
        let inner = self.lock();
        let fresh =
            |(_, at): &(LoadSignals, Instant)| now.saturating_duration_since(*at) <= max_age;
        let Some((load, _)) = inner.load.filter(fresh) else {
            return false;
        };
        let budget = inner
            .gpu_memory_bytes
            .map(|b| b as f64)
            .or(load.gpu_memory_total_bytes)
            .filter(|b| *b > 0.0);
        match (load.gpu_memory_used_bytes, budget) {
            (Some(used), Some(budget)) => used / budget >= full,
            _ => false,
        }
    }

    pub(crate) fn status(&self, policy: &HealthConfig) -> HealthStatus {
        self.lock().state.status(policy)
    }
}
