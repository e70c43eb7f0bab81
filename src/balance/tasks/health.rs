//! The health task: every evaluation interval, folds each backend's
//! recorded outcomes, probe answers and load signals into its score
//! ([`crate::health::evaluate`]), publishes the verdicts (ejected, held in
//! by the cap, weight) as the atomics the picks read, and relaxes idle
//! backends' latency estimates toward the median of the others.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::start::sleep_or_gone;
use crate::balance::state::backend::BackendState;
use crate::balance::state::cost::{median_latency, median_without};
use crate::balance::state::fleet::Fleet;
use crate::balance::state::shared::View;
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
            let sent = picked.wrapping_sub(inner.picked);
            // Picked since, less the growth of those in flight: finished.
            let finished =
                (sent as i64 - (in_flight as i64 - inner.in_flight as i64)).max(0) as u64;
            (inner.picked, inner.in_flight) = (picked, in_flight);
            let taken = b.health.latencies.take();
            let failures = b.health.failures.swap(0, Ordering::Relaxed);
            let answered = b.health.answered.swap(false, Ordering::Relaxed);
            let obs = Observation {
                calls: finished + inner.probes,
                failures: failures + inner.probe_failures,
                timed: taken.count,
                answered: u64::from(answered),
                sent,
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
    let reference = references(backends);
    relax_idle(
        backends,
        &observations,
        &reference,
        fleet.settings.latency_decay,
        dt,
    );
    let mut pairs: Vec<(&mut HealthState, Observation)> = guards
        .iter_mut()
        .map(|g| &mut g.state)
        .zip(observations)
        .collect();
    evaluate(policy, &mut pairs, dt);
    let (mut ejected, mut held) = (0, 0);
    for ((b, (state, _)), &reference) in backends.iter().zip(&pairs).zip(&reference) {
        let out = state.ejected();
        ejected += usize::from(out.is_some());
        held += usize::from(state.held());
        let was_held = b.health.held.swap(state.held(), Ordering::Relaxed);
        let was_out = b.health.ejected.swap(out.is_some(), Ordering::Relaxed);
        if (was_held || was_out) && !state.held() && out.is_none() {
            // Back from unhealthy (ejected, or kept in only by the cap, as
            // either backend of two is): its estimate is from before
            // (failure penalties, a restart). It starts again where a
            // joining backend does, at the median of the others in use.
            b.latency.reset(reference);
            // Its health score still carries the failures (a latency term
            // full of penalties): by cost it would lose every pick at
            // light load until that relaxes, tens of seconds. Its next
            // sample takes a request instead, as a half-open breaker's
            // probe does, and the answer judges it.
            b.health.trial.store(true, Ordering::Relaxed);
        } else if state.held() || out.is_some() {
            b.health.trial.store(false, Ordering::Relaxed);
        }
        if was_out != out.is_some() {
            match out {
                Some(why) => {
                    b.health.ejections.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(backend = %b.id, ?why, score = state.score(), "backend ejected");
                    // Placement's waits on it end (see `BackendState::gone`).
                    b.leave();
                }
                None => {
                    tracing::info!(backend = %b.id, score = state.score(), "backend readmitted")
                }
            }
        }
        b.health.score.set(state.score());
        b.health.ramp.set(state.ramp(policy));
    }
    fleet.gauges.ejected.store(ejected, Ordering::Relaxed);
    fleet.gauges.held.store(held, Ordering::Relaxed);
}

/// Each backend's reference latency: the median estimate of the other
/// backends in use (not removed, not ejected). Its own estimate left in,
/// the median of two backends is the higher estimate, and the idle one of
/// them with it would relax toward itself and never move (issue 39).
fn references(backends: &[Arc<BackendState>]) -> Vec<f64> {
    let in_use = |b: &BackendState| !b.is_removed() && !b.health.is_ejected();
    let mut sorted: Vec<f64> = backends
        .iter()
        .filter(|b| in_use(b))
        .map(|b| b.latency.get())
        .collect();
    sorted.sort_by(f64::total_cmp);
    let all = median_latency(sorted.iter().copied());
    backends
        .iter()
        .map(|b| match in_use(b) {
            true => median_without(&sorted, b.latency.get()),
            // Not among them: every one in use is another.
            false => all,
        })
        .collect()
}

/// Relaxes the latency estimate of every backend that had no timed answer
/// over the last `dt` toward its reference (from [`references`]), with
/// time constant `tau` (see
/// [`BalanceConfigBuilder::latency_decay`](crate::balance::BalanceConfigBuilder::latency_decay)).
fn relax_idle(
    backends: &[Arc<BackendState>],
    observations: &[Observation],
    reference: &[f64],
    tau: Duration,
    dt: Duration,
) {
    let keep = (-dt.as_secs_f64() / tau.as_secs_f64()).exp();
    for ((b, obs), &toward) in backends.iter().zip(observations).zip(reference) {
        if obs.timed == 0 {
            b.latency.relax(toward, keep);
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
