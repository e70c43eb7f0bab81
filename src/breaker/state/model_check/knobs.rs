//! The knobs of a random policy: the values the test draws, which the
//! reference model reads and [`Knobs::policy`] turns into a
//! [`BreakerConfig`].

use std::time::Duration;

use proptest::prelude::*;

use crate::breaker::config::BreakerConfig;

/// The knobs the model reads, with the values the test draws.
#[derive(Debug, Clone)]
pub(super) struct Knobs {
    pub(super) window: usize,
    pub(super) minimum_calls: usize,
    pub(super) failure_rate: f64,
    pub(super) slow_rate: f64,
    pub(super) slow_call: Duration,
    pub(super) consecutive: Option<u32>,
    pub(super) permits: u32,
    pub(super) max_wait: Duration,
    pub(super) open: Duration,
    pub(super) max_open: Duration,
}

impl Knobs {
    pub(super) fn policy(&self) -> BreakerConfig {
        let mut b = BreakerConfig::builder()
            .window(self.window)
            .minimum_calls(self.minimum_calls)
            .failure_rate_threshold(self.failure_rate)
            .slow_call_rate_threshold(self.slow_rate)
            .slow_call_duration(self.slow_call)
            .half_open_permits(self.permits)
            .half_open_max_wait(self.max_wait)
            .open_duration(self.open)
            .max_open_duration(self.max_open)
            .jitter(false);
        if let Some(n) = self.consecutive {
            b = b.consecutive_failures(n);
        }
        b.build().unwrap()
    }
}

pub(super) fn knobs() -> impl Strategy<Value = Knobs> {
    let rate = prop_oneof![Just(0.25), Just(0.5), Just(0.75), Just(1.0), Just(0.3)];
    (
        1usize..8,
        any::<prop::sample::Index>(),
        (rate.clone(), rate),
        proptest::option::of(1u32..5),
        1u32..4,
        (1u64..10, 1u64..4, 1u32..6),
    )
        .prop_map(
            |(window, min, (failure_rate, slow_rate), consecutive, permits, (wait, open, cap))| {
                Knobs {
                    window,
                    minimum_calls: 1 + min.index(window),
                    failure_rate,
                    slow_rate,
                    slow_call: Duration::from_millis(100),
                    consecutive,
                    permits,
                    max_wait: Duration::from_secs(wait),
                    open: Duration::from_secs(open),
                    max_open: Duration::from_secs(open) * cap,
                }
            },
        )
}
