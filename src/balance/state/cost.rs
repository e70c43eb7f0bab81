//! The cost of sending one more request to a backend, and the latency
//! estimate it uses (pure logic over atomics).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::classify::Outcome;

/// Latency a backend is assumed to have before any response (ms).
pub(crate) const DEFAULT_LATENCY_MS: f64 = 30.0;
/// Weight of each new sample in the latency EWMA.
const ALPHA: f64 = 0.2;
/// Latency recorded for a failed request (ms) when it failed faster: a
/// backend that fails fast must not look fast.
pub(crate) const FAILURE_PENALTY_MS: f64 = 1_000.0;
/// Health below which the cost stops growing (health can be 0).
const HEALTH_FLOOR: f64 = 0.05;

/// DESIGN.md's cost: `(in_flight + 1) × latency EWMA / max(health, 0.05)`.
/// Lower is better; P2C takes the cheaper of two backends.
pub(crate) fn cost(in_flight: usize, latency_ms: f64, health: f64) -> f64 {
    (in_flight as f64 + 1.0) * latency_ms / health.max(HEALTH_FLOOR)
}

/// The median of latency estimates (ms; the upper one of an even count),
/// or [`DEFAULT_LATENCY_MS`] with none.
pub(crate) fn median_latency(estimates: impl Iterator<Item = f64>) -> f64 {
    let mut all: Vec<f64> = estimates.collect();
    if all.is_empty() {
        return DEFAULT_LATENCY_MS;
    }
    all.sort_by(f64::total_cmp);
    all[all.len() / 2]
}

/// The median of `sorted` (ascending; the upper one of an even count)
/// with one estimate equal to `own` left out, or [`DEFAULT_LATENCY_MS`]
/// with no other: the reference an idle backend's estimate relaxes
/// toward. Its own estimate left in, the median of two backends is the
/// higher estimate — an idle backend with the higher one would relax
/// toward itself and never move (issue 39).
pub(crate) fn median_without(sorted: &[f64], own: f64) -> f64 {
    let n = sorted.len();
    if n <= 1 {
        return DEFAULT_LATENCY_MS;
    }
    // The upper median of the n − 1 others is their element `m`: the
    // same as `sorted`'s below `own`'s place, one further past it.
    let m = (n - 1) / 2;
    let at = sorted.partition_point(|x| x.total_cmp(&own).is_lt());
    if m < at {
        sorted[m]
    } else {
        sorted[m + 1]
    }
}

/// An exponentially weighted moving average of a backend's latency (ms),
/// updated without a lock (a racing update may be lost).
#[derive(Debug)]
pub(crate) struct LatencyEwma {
    bits: AtomicU64,
}

impl LatencyEwma {
    /// An estimate that starts at `ms` (a joining backend starts at the
    /// fleet's median, so that it looks neither faster nor slower than
    /// the backends already measured).
    pub(crate) fn starting_at(ms: f64) -> Self {
        Self {
            bits: AtomicU64::new(ms.to_bits()),
        }
    }

    /// The estimate in ms.
    pub(crate) fn get(&self) -> f64 {
        f64::from_bits(self.bits.load(Ordering::Relaxed))
    }

    /// Folds in one request's latency; a failure (or an overload) counts
    /// as at least [`FAILURE_PENALTY_MS`].
    pub(crate) fn record(&self, latency: Duration, outcome: Outcome) {
        let mut sample = latency.as_secs_f64() * 1_000.0;
        if matches!(outcome, Outcome::Failure | Outcome::Overload) {
            sample = sample.max(FAILURE_PENALTY_MS);
        }
        let old = self.get();
        let new = old + ALPHA * (sample - old);
        self.bits.store(new.to_bits(), Ordering::Relaxed);
    }

    /// Starts the estimate again at `ms` (a backend readmitted by health:
    /// its estimate is from before it went out).
    pub(crate) fn reset(&self, ms: f64) {
        if ms.is_finite() && ms >= 0.0 {
            self.bits.store(ms.to_bits(), Ordering::Relaxed);
        }
    }

    /// Moves the estimate toward `toward` (ms), keeping the share `keep`
    /// of the gap: `toward + (e − toward) × keep`. An idle backend's
    /// estimate relaxes so (see
    /// [`BalanceConfigBuilder::latency_decay`](crate::balance::BalanceConfigBuilder::latency_decay));
    /// a non-finite or negative `toward` leaves it alone.
    pub(crate) fn relax(&self, toward: f64, keep: f64) {
        if !toward.is_finite() || toward < 0.0 {
            return;
        }
        let old = self.get();
        let new = toward + (old - toward) * keep.clamp(0.0, 1.0);
        self.bits.store(new.to_bits(), Ordering::Relaxed);
    }
}

/// The weight in [0, 1] a backend's cost is divided by: its health score
/// times its warm-up ramp (1 until the health evaluation sets it).
#[derive(Debug)]
pub(crate) struct Weight {
    bits: AtomicU32,
}

impl Weight {
    pub(crate) fn new() -> Self {
        Self {
            bits: AtomicU32::new(1.0f32.to_bits()),
        }
    }

    pub(crate) fn get(&self) -> f64 {
        f64::from(f32::from_bits(self.bits.load(Ordering::Relaxed)))
    }

    /// Sets the score, clamped to [0, 1] (NaN reads as 0).
    pub(crate) fn set(&self, score: f64) {
        let score = if score.is_nan() {
            0.0
        } else {
            score.clamp(0.0, 1.0)
        };
        self.bits.store((score as f32).to_bits(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_grows_with_load_and_latency_and_falls_with_health() {
        assert_eq!(cost(0, 10.0, 1.0), 10.0);
        assert_eq!(cost(3, 10.0, 1.0), 40.0);
        assert_eq!(cost(3, 10.0, 0.5), 80.0);
        assert_eq!(
            cost(0, 10.0, 0.0),
            cost(0, 10.0, 0.05),
            "health 0 is floored"
        );
    }

    #[test]
    fn failing_fast_does_not_look_fast() {
        let fast_failing = LatencyEwma::starting_at(DEFAULT_LATENCY_MS);
        let healthy = LatencyEwma::starting_at(DEFAULT_LATENCY_MS);
        for _ in 0..20 {
            fast_failing.record(Duration::from_millis(1), Outcome::Failure);
            healthy.record(Duration::from_millis(20), Outcome::Success);
        }
        assert!(fast_failing.get() > 900.0, "{}", fast_failing.get());
        assert!((healthy.get() - 20.0).abs() < 1.0, "{}", healthy.get());
    }

    #[test]
    fn an_idle_estimate_relaxes_toward_the_median() {
        let e = LatencyEwma::starting_at(3_030.0);
        let keep = (-1.0f64 / 10.0).exp();
        for _ in 0..10 {
            e.relax(30.0, keep);
        }
        // One time constant: e^-1 of the gap left.
        assert!((e.get() - (30.0 + 3_000.0 / std::f64::consts::E)).abs() < 1e-6);
        e.relax(f64::NAN, 0.0);
        assert!(e.get() > 1_000.0, "a NaN median moves nothing");
        let fast = LatencyEwma::starting_at(1.0);
        fast.relax(30.0, 0.0);
        assert_eq!(fast.get(), 30.0, "an idle fast backend rises to the median");
    }

    #[test]
    fn the_reference_leaves_out_the_backends_own_estimate() {
        // Two backends: each relaxes toward the other, never itself.
        assert_eq!(median_without(&[30.0, 1_000.0], 1_000.0), 30.0);
        assert_eq!(median_without(&[30.0, 1_000.0], 30.0), 1_000.0);
        // One: nothing else to go by.
        assert_eq!(median_without(&[1_000.0], 1_000.0), DEFAULT_LATENCY_MS);
        assert_eq!(median_without(&[], 5.0), DEFAULT_LATENCY_MS);
        // Equal estimates: one of them left out.
        assert_eq!(median_without(&[20.0, 30.0, 30.0], 30.0), 30.0);
        // Against the naive computation, every backend of a fleet.
        let sorted = [1.0, 2.0, 2.0, 5.0, 8.0, 13.0];
        for (i, &own) in sorted.iter().enumerate() {
            let mut others = sorted.to_vec();
            others.remove(i);
            assert_eq!(
                median_without(&sorted, own),
                median_latency(others.into_iter())
            );
        }
    }

    #[test]
    fn weight_is_clamped() {
        let h = Weight::new();
        assert_eq!(h.get(), 1.0);
        h.set(7.0);
        assert_eq!(h.get(), 1.0);
        h.set(f64::NAN);
        assert_eq!(h.get(), 0.0);
    }
}
