//! The health task: every evaluation interval, folds each backend's
//! recorded outcomes, probe answers and load signals into its score
//! ([`crate::health::evaluate`]), publishes the verdicts (ejected, held in
//! by the cap, weight) as the atomics the picks read, and relaxes idle
//! backends' latency estimates toward the fleet's median.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::balance::state::backend::BackendState;
use crate::balance::state::cost::median_latency;
use crate::balance::state::fleet::Fleet;
use crate::balance::state::shared::View;
use crate::balance::tasks::sleep_or_gone;
use crate::health::{evaluate, HealthState, Observation};

/// Probe load signals older than this many intervals are not used.
const STALE_INTERVALS: u32 = 3;

/// Evaluates every backend of the table once, `dt` after the last time.
pub(crate) fn evaluate_fleet(
    backends: &[Arc<BackendState>],
    fleet: &Fleet,
    now: Instant,
    dt: Duration,
) {
    let policy = &fleet.settings.health;
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
            let answers = b.health.answers.swap(0, Ordering::Relaxed);
            let obs = Observation {
                calls: finished + inner.probes,
                failures: failures + inner.probe_failures,
                timed: taken.count,
                answered: answers + failures,
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
    relax_idle(backends, &observations, fleet.settings.latency_decay, dt);
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
    fleet.gauges.ejected.store(ejected, Ordering::Relaxed);
    fleet.gauges.held.store(held, Ordering::Relaxed);
}

/// Relaxes the latency estimate of every backend that had no timed answer
/// over the last `dt` toward the median estimate of those in use, with
/// time constant `tau` (see
/// [`BalanceConfigBuilder::latency_decay`](crate::balance::BalanceConfigBuilder::latency_decay)).
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
