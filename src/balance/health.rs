//! Backend health inside the balancer: outcomes recorded without a lock on
//! the request path, folded into scores by a background task every
//! evaluation interval, and the verdicts published as atomics the picks
//! read.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::backend::BackendMeta;
use super::cost::{median_latency, Weight};
use super::handle::View;
use super::sleep_or_gone;
use super::table::{BackendState, Fleet};
use crate::backend::BackendId;
use crate::endpoint::Origin;
use crate::health::probe::ProbeTarget;
use crate::health::{
    evaluate, HealthPolicy, HealthState, HealthStatus, LatencyHistogram, LoadSignals, Observation,
};

/// Probe load signals older than this many intervals are not used.
const STALE_INTERVALS: u32 = 3;

/// One backend's health: what the request path records, and the verdict
/// it reads.
#[derive(Debug)]
pub(crate) struct BackendHealth {
    /// The weight P2C divides the cost by (score × warm-up ramp).
    pub(crate) weight: Weight,
    /// Out of the eligible set (by score or as a latency outlier).
    ejected: AtomicBool,
    /// Asked to be ejected and kept in by the ejection cap: eligible, but
    /// unhealthy for the panic threshold.
    held: AtomicBool,
    /// Times it was ejected.
    pub(crate) ejections: AtomicU64,
    /// Failed requests since the last evaluation.
    failures: AtomicU64,
    /// Failed requests since it joined.
    pub(crate) failed: AtomicU64,
    /// Timed requests' latencies since the last evaluation (failures at
    /// the penalty).
    latencies: LatencyHistogram,
    inner: Mutex<Inner>,
}

/// What only the evaluation and probe reports touch.
#[derive(Debug)]
struct Inner {
    state: HealthState,
    /// Requests picked here at the last evaluation, and in flight then:
    /// their change is the requests finished.
    picked: u64,
    in_flight: usize,
    probes: u64,
    probe_failures: u64,
    load: Option<(LoadSignals, Instant)>,
    address: Option<Origin>,
    metrics_address: Option<Origin>,
    gpu_memory_bytes: Option<u64>,
}

impl BackendHealth {
    /// A backend with no data; `warming` when it joins a running fleet.
    pub(crate) fn new(policy: &HealthPolicy, warming: bool) -> Self {
        let state = HealthState::new(warming);
        let weight = Weight::new();
        weight.set(state.weight(policy));
        Self {
            weight,
            ejected: AtomicBool::new(false),
            held: AtomicBool::new(false),
            ejections: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            failed: AtomicU64::new(0),
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

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn is_ejected(&self) -> bool {
        self.ejected.load(Ordering::Relaxed)
    }

    /// Whether only the ejection cap keeps it in (see
    /// [`HealthStatus::held_by_cap`]).
    pub(crate) fn is_held(&self) -> bool {
        self.held.load(Ordering::Relaxed)
    }

    /// Records a finished request: `failed` when it failed (always
    /// counted, for the error rate), `latency` when it was timed. Only
    /// timed requests enter the latency histogram, a failure at `penalty`
    /// at least: successes and failures are timed at the same rate, so a
    /// sample of the requests does not make failures look more common
    /// than they are.
    pub(crate) fn record(&self, latency: Option<Duration>, failed: bool, penalty: Duration) {
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

    /// Records a probe's answer: `failed` when it failed or said not
    /// ready; `load` when it read load signals.
    pub(crate) fn record_probe(&self, failed: bool, load: Option<LoadSignals>, now: Instant) {
        let mut inner = self.lock();
        inner.probes += 1;
        inner.probe_failures += u64::from(failed);
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

    pub(crate) fn status(&self, policy: &HealthPolicy) -> HealthStatus {
        self.lock().state.status(policy)
    }
}

/// Evaluates every backend of the table once, `dt` after the last time.
pub(crate) fn evaluate_fleet(
    backends: &[Arc<BackendState>],
    fleet: &Fleet,
    now: Instant,
    dt: Duration,
) {
    let policy = &fleet.health;
    let mut guards: Vec<_> = backends.iter().map(|b| b.health.lock()).collect();
    let stale = policy.interval.saturating_mul(STALE_INTERVALS);
    let observations: Vec<Observation> = backends
        .iter()
        .zip(guards.iter_mut())
        .map(|(b, inner)| {
            let (picked, in_flight) = (b.traffic.picked(), b.load());
            // Picked since, less the growth of those in flight: finished.
            let finished = (picked.wrapping_sub(inner.picked) as i64
                - (in_flight as i64 - inner.in_flight as i64))
                .max(0) as u64;
            (inner.picked, inner.in_flight) = (picked, in_flight);
            let taken = b.health.latencies.take();
            let failures = b.health.failures.swap(0, Ordering::Relaxed);
            let obs = Observation {
                calls: finished + inner.probes,
                failures: failures + inner.probe_failures,
                timed: taken.count,
                p99_ms: taken.p99_ms,
                in_flight,
                load: inner
                    .load
                    .filter(|(_, at)| now.saturating_duration_since(*at) <= stale)
                    .map(|(l, _)| l),
                gpu_memory_bytes: inner.gpu_memory_bytes,
            };
            (inner.probes, inner.probe_failures) = (0, 0);
            obs
        })
        .collect();
    relax_idle(backends, &observations, fleet.latency_decay, dt);
    let mut pairs: Vec<(&mut HealthState, Observation)> = guards
        .iter_mut()
        .map(|g| &mut g.state)
        .zip(observations)
        .collect();
    evaluate(policy, &mut pairs, dt);
    let (mut ejected, mut held) = (0, 0);
    for (b, (state, _)) in backends.iter().zip(&pairs) {
        let out = state.ejected();
        ejected += usize::from(out.is_some());
        held += usize::from(state.held());
        b.health.held.store(state.held(), Ordering::Relaxed);
        if b.health.ejected.swap(out.is_some(), Ordering::Relaxed) != out.is_some() {
            match out {
                Some(why) => {
                    b.health.ejections.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(backend = %b.id, ?why, score = state.score(), "backend ejected");
                }
                None => {
                    tracing::info!(backend = %b.id, score = state.score(), "backend readmitted")
                }
            }
        }
        b.health.weight.set(state.weight(policy));
    }
    fleet.ejected.store(ejected, Ordering::Relaxed);
    fleet.held.store(held, Ordering::Relaxed);
}

/// Relaxes the latency estimate of every backend that had no timed answer
/// over the last `dt` toward the median estimate of those in use, with
/// time constant `tau` (see
/// [`BalanceConfigBuilder::latency_decay`](super::BalanceConfigBuilder::latency_decay)).
fn relax_idle(
    backends: &[Arc<BackendState>],
    observations: &[Observation],
    tau: Duration,
    dt: Duration,
) {
    let in_use = backends
        .iter()
        .filter(|b| !b.is_removed() && !b.health.is_ejected());
    let median = median_latency(in_use.map(|b| b.latency.get()));
    let keep = (-dt.as_secs_f64() / tau.as_secs_f64()).exp();
    for (b, obs) in backends.iter().zip(observations) {
        if obs.timed == 0 {
            b.latency.relax(median, keep);
        }
    }
}

/// Evaluates health every interval until the balancer is gone.
pub(crate) async fn run(
    view: Weak<dyn View>,
    interval: Duration,
    mut gone: tokio::sync::watch::Receiver<()>,
) {
    let mut last = Instant::now();
    loop {
        if sleep_or_gone(last + interval, &mut gone).await {
            return;
        }
        let now = Instant::now();
        let Some(view) = view.upgrade() else {
            return;
        };
        let table = view.table();
        evaluate_fleet(&table.backends, &table.fleet, now, now - last);
        last = now;
    }
}
