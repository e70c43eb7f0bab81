//! Each backend's admission limit: fixed, or adaptive by AIMD (pure logic
//! over one atomic).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::balance::config::admission::AdmissionConfig;
use crate::balance::config::admission::{Aimd, LimitKind};
use crate::classify::Outcome;

/// One backend's limit on requests in flight, as an `f64` in an atomic
/// word (an adaptive limit moves by fractions). Without admission it is
/// infinite: every comparison with it passes.
#[derive(Debug)]
pub(crate) struct BackendLimit(AtomicU64);

impl BackendLimit {
    /// The starting limit `admission` gives, or none.
    pub(crate) fn new(admission: Option<&AdmissionConfig>) -> Self {
        let start = admission.map_or(f64::INFINITY, |a| a.limit.initial() as f64);
        Self(AtomicU64::new(start.to_bits()))
    }

    /// Requests in flight allowed now (`usize::MAX` without admission).
    #[inline]
    pub(crate) fn get(&self) -> usize {
        // Saturating: infinity is `usize::MAX`.
        f64::from_bits(self.0.load(Ordering::Relaxed)) as usize
    }

    /// Folds one timed outcome into an adaptive limit (a fixed one does not
    /// move); `in_flight`: the backend's requests in flight as it ended.
    pub(crate) fn record(
        &self,
        admission: &AdmissionConfig,
        outcome: Outcome,
        latency: Duration,
        in_flight: usize,
    ) {
        let LimitKind::Aimd(aimd) = admission.limit.kind else {
            return;
        };
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                let limit = f64::from_bits(bits);
                let next = aimd_step(&aimd, limit, outcome, latency, in_flight);
                (next != limit).then_some(next.to_bits())
            });
    }
}

/// One step of Netflix `concurrency-limits`' `AIMDLimit`: a drop (a
/// failure, an overload, or a success slower than the latency threshold)
/// multiplies the limit by the backoff ratio; a success while at least
/// half the limit is in flight adds `1 / limit` (one per window of
/// successes, where `AIMDLimit` adds one per success: with the balancer's
/// latency sample thinned to 1 in 16 under load, a whole one per sampled
/// success would grow sixteen times faster than drops shrink it). Clamped
/// to `min ..= max`. A caller's error says nothing of the backend: no step.
pub(crate) fn aimd_step(
    aimd: &Aimd,
    limit: f64,
    outcome: Outcome,
    latency: Duration,
    in_flight: usize,
) -> f64 {
    let dropped = match outcome {
        Outcome::Failure | Outcome::Overload => true,
        Outcome::Success => latency > aimd.latency_threshold,
        _ => return limit,
    };
    let next = if dropped {
        limit * aimd.backoff
    } else if in_flight as f64 * 2.0 >= limit {
        limit + 1.0 / limit
    } else {
        // Not limited by the limit: what it allows was not tried.
        limit
    };
    next.clamp(aimd.min as f64, aimd.max as f64)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::balance::config::admission::Limit;

    fn aimd(min: usize, max: usize) -> Aimd {
        match Limit::aimd(min, max)
            .with_latency_threshold(Duration::from_millis(100))
            .kind
        {
            LimitKind::Aimd(a) => a,
            LimitKind::Fixed(_) => unreachable!(),
        }
    }

    const FAST: Duration = Duration::from_millis(10);
    const SLOW: Duration = Duration::from_millis(200);

    #[test]
    fn grows_by_one_per_window_and_backs_off_on_drops() {
        let a = aimd(1, 100);
        let mut limit = 10.0;
        for _ in 0..10 {
            limit = aimd_step(&a, limit, Outcome::Success, FAST, 10);
        }
        assert!((10.9..11.0).contains(&limit), "one window of 10: {limit}");
        assert_eq!(aimd_step(&a, 10.0, Outcome::Failure, FAST, 10), 9.0);
        assert_eq!(aimd_step(&a, 10.0, Outcome::Overload, FAST, 10), 9.0);
        assert_eq!(aimd_step(&a, 10.0, Outcome::Success, SLOW, 10), 9.0, "slow");
        assert_eq!(
            aimd_step(&a, 10.0, Outcome::Success, FAST, 4),
            10.0,
            "app-limited"
        );
        assert_eq!(
            aimd_step(&a, 10.0, Outcome::Ignored, SLOW, 10),
            10.0,
            "caller's"
        );
    }

    #[test]
    fn a_fixed_limit_never_moves_and_none_is_unlimited() {
        let fixed = AdmissionConfig::builder(Limit::fixed(4)).build().unwrap();
        let limit = BackendLimit::new(Some(&fixed));
        limit.record(&fixed, Outcome::Failure, SLOW, 4);
        assert_eq!(limit.get(), 4);
        assert_eq!(BackendLimit::new(None).get(), usize::MAX);
        let adaptive = AdmissionConfig::builder(Limit::aimd(2, 8)).build().unwrap();
        let limit = BackendLimit::new(Some(&adaptive));
        assert_eq!(limit.get(), 2, "starts at min");
        for _ in 0..100 {
            limit.record(&adaptive, Outcome::Success, FAST, 8);
        }
        assert_eq!(limit.get(), 8, "clamped to max");
        for _ in 0..100 {
            limit.record(&adaptive, Outcome::Failure, FAST, 8);
        }
        assert_eq!(limit.get(), 2, "clamped to min");
    }

    proptest! {
        /// Whatever the outcomes, the limit stays within its bounds, and
        /// no success lowers it nor drop raises it.
        #[test]
        fn stays_in_bounds_and_moves_the_right_way(
            min in 1usize..50,
            span in 0usize..50,
            steps in prop::collection::vec((0u8..4, 0u64..300, 0usize..120), 1..200),
        ) {
            let a = aimd(min, min + span);
            let mut limit = min as f64;
            for (o, ms, in_flight) in steps {
                let outcome = [Outcome::Success, Outcome::Failure, Outcome::Overload, Outcome::Ignored][o as usize];
                let latency = Duration::from_millis(ms);
                let next = aimd_step(&a, limit, outcome, latency, in_flight);
                prop_assert!(next >= a.min as f64 && next <= a.max as f64);
                let dropped = matches!(outcome, Outcome::Failure | Outcome::Overload)
                    || (outcome == Outcome::Success && latency > a.latency_threshold);
                if dropped { prop_assert!(next <= limit); } else { prop_assert!(next >= limit); }
                limit = next;
            }
        }
    }
}
