//! The cost of sending one more request to a backend, the latency
//! estimate it uses, and how P2C compares two costs (pure logic over
//! atomics).

use std::cmp::Ordering as Order;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::classify::Outcome;

/// Latency a backend is assumed to have before any response (ms).
pub(crate) const DEFAULT_LATENCY_MS: f64 = 30.0;
/// Weight of each new sample in the latency EWMA.
const ALPHA: f64 = 0.2;
/// Latency recorded for a failed request (ms) when it failed faster: a
/// backend that fails fast must not look fast.
pub(crate) const FAILURE_PENALTY_MS: f64 = 1_000.0;
/// Health below which the cost stops growing (health can be 0); a
/// backend at it is taken only when its rival is too (see [`at_floor`]).
const HEALTH_FLOOR: f64 = 0.05;
/// Costs within this share of the lower one are a tie, broken at random
/// (see [`compare`]).
pub(crate) const TIE: f64 = 0.1;

/// DESIGN.md's cost with the warm-up ramp on the queue:
/// `(in_flight / ramp + 1) × latency EWMA / max(health, 0.05)`. Lower
/// is better; P2C takes the cheaper of two backends ([`compare`]).
///
/// `health` is the backend's health score; `ramp` its warm-up (slow
/// start) weight, in `(0, 1]`: a warming backend's requests in flight
/// count `1 / ramp` each, so under load it takes a growing share of the
/// queue, while an idle one competes on its estimate and health alone
/// (an idle backend's next request queues behind nothing, however new
/// it is).
pub(crate) fn cost(in_flight: usize, latency_ms: f64, health: f64, ramp: f64) -> f64 {
    (in_flight as f64 / ramp.max(HEALTH_FLOOR) + 1.0) * latency_ms / health.max(HEALTH_FLOOR)
}

/// Whether a health score is at the floor (a backend at health 0, every
/// probe saying not ready, or failing nearly every request): P2C gives
/// it nothing while its rival is above the floor, whatever the load.
/// A NaN score counts as at the floor.
pub(crate) fn at_floor(health: f64) -> bool {
    health.is_nan() || health <= HEALTH_FLOOR
}

/// How P2C orders two costs: the lower wins, and costs within [`TIE`]
/// of each other are equal (a tie, broken at random). Latency estimates
/// are EWMAs of answers that vary: two backends serving alike hold
/// estimates a few percent apart that trade places from one answer to
/// the next, and a strict comparison would hand every request to
/// whichever is lower by a hair (by an ulp, with answers that do not
/// vary at all). A backend 20% slower than its rival stays outside the
/// band and gets nothing while both are idle.
pub(crate) fn compare(a: f64, b: f64) -> Order {
    if !(a.is_finite() && b.is_finite()) {
        return a.total_cmp(&b);
    }
    if (a - b).abs() <= TIE * a.min(b) {
        Order::Equal
    } else {
        a.total_cmp(&b)
    }
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
///
/// It starts as a guess (the fleet's median, or [`DEFAULT_LATENCY_MS`])
/// that the first answer replaces, as TCP's first RTT measurement sets
/// its smoothed RTT (RFC 6298, 2.2): folded into a guess from another
/// backend, one answer would leave most of the guess in, and P2C, which
/// takes the cheaper backend, would keep a backend 3× faster than the
/// guess out for as long as the guess takes to relax away. Until then
/// the guess follows the other backends' median ([`LatencyEwma::relax`]).
#[derive(Debug)]
pub(crate) struct LatencyEwma {
    bits: AtomicU64,
    /// Whether an answer has set the estimate since it was last a guess.
    measured: AtomicBool,
}

impl LatencyEwma {
    /// An estimate that starts as the guess `ms` (a joining backend starts
    /// at the fleet's median, so that it looks neither faster nor slower
    /// than the backends already measured).
    pub(crate) fn starting_at(ms: f64) -> Self {
        Self {
            bits: AtomicU64::new(ms.to_bits()),
            measured: AtomicBool::new(false),
        }
    }

    /// The estimate in ms.
    pub(crate) fn get(&self) -> f64 {
        f64::from_bits(self.bits.load(Ordering::Relaxed))
    }

    /// Folds in one request's latency (the first answer replaces the
    /// guess); a failure (or an overload) counts as at least
    /// [`FAILURE_PENALTY_MS`].
    pub(crate) fn record(&self, latency: Duration, outcome: Outcome) {
        let mut sample = latency.as_secs_f64() * 1_000.0;
        if matches!(outcome, Outcome::Failure | Outcome::Overload) {
            sample = sample.max(FAILURE_PENALTY_MS);
        }
        let new = if self.measured.load(Ordering::Relaxed) {
            let old = self.get();
            old + ALPHA * (sample - old)
        } else {
            self.measured.store(true, Ordering::Relaxed);
            sample
        };
        self.bits.store(new.to_bits(), Ordering::Relaxed);
    }

    /// Starts the estimate again as the guess `ms` (a backend readmitted
    /// by health: its estimate is from before it went out).
    pub(crate) fn reset(&self, ms: f64) {
        if ms.is_finite() && ms >= 0.0 {
            self.bits.store(ms.to_bits(), Ordering::Relaxed);
            self.measured.store(false, Ordering::Relaxed);
        }
    }

    /// Moves the estimate toward `toward` (ms), keeping the share `keep`
    /// of the gap: `toward + (e − toward) × keep`; a guess no answer has
    /// replaced yet moves all the way. An idle backend's estimate relaxes
    /// so (see
    /// [`BalanceConfigBuilder::latency_decay`](crate::balance::BalanceConfigBuilder::latency_decay));
    /// a non-finite or negative `toward` leaves it alone.
    pub(crate) fn relax(&self, toward: f64, keep: f64) {
        if !toward.is_finite() || toward < 0.0 {
            return;
        }
        let keep = match self.measured.load(Ordering::Relaxed) {
            true => keep.clamp(0.0, 1.0),
            false => 0.0,
        };
        let old = self.get();
        let new = toward + (old - toward) * keep;
        self.bits.store(new.to_bits(), Ordering::Relaxed);
    }
}

/// A weight in [0, 1] the cost reads: a backend's health score, or its
/// warm-up ramp (1 until the health evaluation sets it).
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
        assert_eq!(cost(0, 10.0, 1.0, 1.0), 10.0);
        assert_eq!(cost(3, 10.0, 1.0, 1.0), 40.0);
        assert_eq!(cost(3, 10.0, 0.5, 1.0), 80.0);
        assert_eq!(
            cost(0, 10.0, 0.0, 1.0),
            cost(0, 10.0, 0.05, 1.0),
            "health 0 is floored"
        );
        assert!(at_floor(0.0) && at_floor(0.05) && at_floor(f64::NAN));
        assert!(!at_floor(0.06));
    }

    #[test]
    fn the_warm_up_ramp_weighs_the_queue_not_an_idle_backend() {
        // Idle: as costly as a backend at full weight.
        assert_eq!(cost(0, 10.0, 1.0, 0.5), cost(0, 10.0, 1.0, 1.0));
        // Each request in flight counts double at the ramp's first weight.
        assert_eq!(cost(2, 10.0, 1.0, 0.5), cost(4, 10.0, 1.0, 1.0));
    }

    #[test]
    fn costs_within_the_band_tie() {
        assert_eq!(compare(30.0, 31.0), Order::Equal);
        assert_eq!(compare(31.0, 30.0), Order::Equal);
        assert_eq!(compare(30.0, 30.0 * (1.0 + TIE)), Order::Equal);
        assert_eq!(compare(30.0, 36.0), Order::Less, "20% slower loses");
        assert_eq!(compare(36.0, 30.0), Order::Greater);
        assert_eq!(compare(30.0, f64::INFINITY), Order::Less);
        assert_eq!(compare(0.0, 0.0), Order::Equal);
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
    fn the_first_answer_replaces_the_guess() {
        let e = LatencyEwma::starting_at(DEFAULT_LATENCY_MS);
        e.record(Duration::from_millis(10), Outcome::Success);
        assert_eq!(e.get(), 10.0);
        e.record(Duration::from_millis(20), Outcome::Success);
        assert!((e.get() - 12.0).abs() < 1e-9, "then an EWMA: {}", e.get());
        // A guess again: it follows the median until the next answer.
        e.reset(50.0);
        e.relax(40.0, 0.9);
        assert_eq!(e.get(), 40.0);
        e.record(Duration::from_millis(8), Outcome::Success);
        assert_eq!(e.get(), 8.0);
    }

    #[test]
    fn an_idle_estimate_relaxes_toward_the_median() {
        let e = LatencyEwma::starting_at(DEFAULT_LATENCY_MS);
        e.record(Duration::from_millis(3_030), Outcome::Success);
        let keep = (-1.0f64 / 10.0).exp();
        for _ in 0..10 {
            e.relax(30.0, keep);
        }
        // One time constant: e^-1 of the gap left.
        assert!((e.get() - (30.0 + 3_000.0 / std::f64::consts::E)).abs() < 1e-6);
        e.relax(f64::NAN, 0.0);
        assert!(e.get() > 1_000.0, "a NaN median moves nothing");
        let fast = LatencyEwma::starting_at(DEFAULT_LATENCY_MS);
        fast.record(Duration::from_millis(1), Outcome::Success);
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
