//! [`BreakerConfig`]: the breaker's validated windows, thresholds and durations.

use std::time::Duration;

use crate::error::InvalidConfig;

/// The sliding window whose calls decide the failure and slow-call rates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlidingWindow {
    /// The last `calls` recorded calls (1 ..= 10 000).
    Count {
        /// Calls in the window.
        calls: usize,
    },
    /// The calls recorded in the last `duration`, counted in `buckets`
    /// equal slices that expire one at a time — the rate does not depend on
    /// the request rate. `duration` 100 ms ..= 1 h, `buckets` 1 ..= 100,
    /// each bucket at least 1 ms.
    Time {
        /// Length of the window.
        duration: Duration,
        /// Slices the window is counted in.
        buckets: u32,
    },
}

/// When a breaker trips, how long it stays open and how it probes.
///
/// Built with [`BreakerConfig::builder`]; [`BreakerConfigBuilder::build`] validates every
/// value and names the first field out of range. Defaults (in the manner
/// of resilience4j, scaled to an inference backend):
///
/// | field | default | range |
/// | --- | --- | --- |
/// | `window` | last 20 calls | 1 ..= 10 000 calls, or a [time window](SlidingWindow::Time) |
/// | `minimum_calls` (calls; timed calls for the slow-call rate) | 10, or a smaller count window's size | 1 ..= 10 000, and at most a count window's size |
/// | `failure_rate_threshold` (fraction) | 0.5 | (0, 1] |
/// | `slow_call_rate_threshold` (fraction) | 1.0 | (0, 1] |
/// | `slow_call_duration` | 10 s | 1 ms ..= 1 h |
/// | `consecutive_failures` | off | 1 ..= 10 000 |
/// | `half_open_permits` (calls) | 3 | 1 ..= 1 000 |
/// | `half_open_max_wait` | 300 s | 1 ms ..= 1 h |
/// | `open_duration` (base of the backoff) | 5 s | 1 ms ..= 1 h |
/// | `max_open_duration` | 120 s | `open_duration` ..= 24 h |
/// | `jitter` (each open time drawn in [d/2, d]) | on | on / off |
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BreakerConfig {
    pub(crate) window: SlidingWindow,
    pub(crate) minimum_calls: usize,
    pub(crate) failure_rate_threshold: f64,
    pub(crate) slow_call_rate_threshold: f64,
    pub(crate) slow_call_duration: Duration,
    pub(crate) consecutive_failures: Option<u32>,
    pub(crate) half_open_permits: u32,
    pub(crate) half_open_max_wait: Duration,
    pub(crate) open_duration: Duration,
    pub(crate) max_open_duration: Duration,
    pub(crate) jitter: bool,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            window: SlidingWindow::Count { calls: 20 },
            minimum_calls: 10,
            failure_rate_threshold: 0.5,
            slow_call_rate_threshold: 1.0,
            slow_call_duration: Duration::from_secs(10),
            consecutive_failures: None,
            half_open_permits: 3,
            half_open_max_wait: Duration::from_secs(300),
            open_duration: Duration::from_secs(5),
            max_open_duration: Duration::from_secs(120),
            jitter: true,
        }
    }
}

impl BreakerConfig {
    /// The sliding window.
    #[cfg_attr(not(feature = "config"), allow(dead_code))]
    pub(crate) fn window(&self) -> SlidingWindow {
        self.window
    }

    /// Calls the window must hold before either rate can trip.
    // Read by `config` (feature `config`) and the balancer.
    #[cfg_attr(not(feature = "config"), allow(dead_code))]
    pub(crate) fn minimum_calls(&self) -> usize {
        self.minimum_calls
    }

    /// Failure rate in `(0, 1]` at or above which the breaker opens.
    // Read by `config` (feature `config`) and the balancer.
    #[cfg_attr(not(feature = "config"), allow(dead_code))]
    pub(crate) fn failure_rate_threshold(&self) -> f64 {
        self.failure_rate_threshold
    }

    /// Slow-call rate in `(0, 1]` at or above which the breaker opens.
    // Read by `config` (feature `config`) and the balancer.
    #[cfg_attr(not(feature = "config"), allow(dead_code))]
    pub(crate) fn slow_call_rate_threshold(&self) -> f64 {
        self.slow_call_rate_threshold
    }

    /// A timed call taking at least this long is slow.
    // Read by `config` (feature `config`) and the balancer.
    #[cfg_attr(not(feature = "config"), allow(dead_code))]
    pub(crate) fn slow_call_duration(&self) -> Duration {
        self.slow_call_duration
    }

    /// Consecutive failures that trip the breaker at once, if set.
    #[cfg_attr(not(feature = "config"), allow(dead_code))]
    pub(crate) fn consecutive_failures(&self) -> Option<u32> {
        self.consecutive_failures
    }

    /// Probe calls let through while half-open.
    // Read by `config` (feature `config`) and the balancer.
    #[cfg_attr(not(feature = "config"), allow(dead_code))]
    pub(crate) fn half_open_permits(&self) -> u32 {
        self.half_open_permits
    }

    /// The longest a half-open probe round may take before the breaker
    /// opens again.
    // Read by `config` (feature `config`) and the balancer.
    #[cfg_attr(not(feature = "config"), allow(dead_code))]
    pub(crate) fn half_open_max_wait(&self) -> Duration {
        self.half_open_max_wait
    }

    /// Base of the open duration's exponential backoff.
    #[cfg_attr(not(feature = "config"), allow(dead_code))]
    pub(crate) fn open_duration(&self) -> Duration {
        self.open_duration
    }

    /// Ceiling of the open duration's exponential backoff.
    #[cfg_attr(not(feature = "config"), allow(dead_code))]
    pub(crate) fn max_open_duration(&self) -> Duration {
        self.max_open_duration
    }

    /// Whether open durations are drawn with equal jitter, in
    /// `[ceiling / 2, ceiling]`.
    #[cfg_attr(not(feature = "config"), allow(dead_code))]
    pub(crate) fn jitter(&self) -> bool {
        self.jitter
    }

    /// The open duration's ceiling after `reopened` consecutive reopenings
    /// without closing: `open_duration × 2^reopened`, at most
    /// `max_open_duration`.
    pub(crate) fn open_ceiling(&self, reopened: u32) -> Duration {
        let factor = 1u32 << reopened.min(31);
        self.open_duration
            .checked_mul(factor)
            .map_or(self.max_open_duration, |d| d.min(self.max_open_duration))
    }

    /// A builder starting from the defaults.
    pub fn builder() -> BreakerConfigBuilder {
        BreakerConfigBuilder {
            policy: BreakerConfig::default(),
            minimum_calls_set: false,
        }
    }
}

/// Builds a validated [`BreakerConfig`].
///
/// ```
/// use std::time::Duration;
/// use tower_model_balance::breaker::BreakerConfig;
///
/// let policy = BreakerConfig::builder()
///     .time_window(Duration::from_secs(30), 10)
///     .minimum_calls(20)
///     .failure_rate_threshold(0.25)
///     .slow_call_rate_threshold(0.8)
///     .slow_call_duration(Duration::from_secs(2))
///     .consecutive_failures(5)
///     .open_duration(Duration::from_secs(1))
///     .max_open_duration(Duration::from_secs(60))
///     .build()
///     .unwrap();
/// assert!(format!("{policy:?}").contains("consecutive_failures: Some(5)"));
///
/// let err = BreakerConfig::builder().failure_rate_threshold(1.5).build().unwrap_err();
/// assert_eq!(err.field, "failure_rate_threshold");
/// ```
#[derive(Debug, Clone)]
pub struct BreakerConfigBuilder {
    policy: BreakerConfig,
    /// Whether `minimum_calls` was set: unset, it follows a count window
    /// down (`min(10, calls)`).
    minimum_calls_set: bool,
}

impl BreakerConfigBuilder {
    /// A count-based window of the last `calls` calls (1 ..= 10 000;
    /// default 20). Unless [`minimum_calls`](Self::minimum_calls) is set,
    /// the minimum becomes `min(10, calls)`, so `window(5)` alone builds.
    pub fn window(mut self, calls: usize) -> Self {
        self.policy.window = SlidingWindow::Count { calls };
        self
    }

    /// A time-based window: the calls of the last `duration` (100 ms ..=
    /// 1 h), counted in `buckets` slices (1 ..= 100, each at least 1 ms).
    pub fn time_window(mut self, duration: Duration, buckets: u32) -> Self {
        self.policy.window = SlidingWindow::Time { duration, buckets };
        self
    }

    /// Calls the window must hold before either rate can trip: calls for
    /// the failure rate, timed calls for the slow-call rate (1 ..=
    /// 10 000, and at most a count window's size; default 10, or a count
    /// window's size if it is smaller). Set explicitly above a count
    /// window's size, [`build`](Self::build) fails naming
    /// `minimum_calls`.
    pub fn minimum_calls(mut self, calls: usize) -> Self {
        self.policy.minimum_calls = calls;
        self.minimum_calls_set = true;
        self
    }

    /// The failure-rate threshold, a fraction in `(0, 1]` (default 0.5).
    /// Failures and overloads (429) count.
    pub fn failure_rate_threshold(mut self, rate: f64) -> Self {
        self.policy.failure_rate_threshold = rate;
        self
    }

    /// The slow-call-rate threshold, a fraction in `(0, 1]` of the timed
    /// calls (default 1.0: every timed call in the window slow), judged
    /// once the window holds [`minimum_calls`](Self::minimum_calls) timed
    /// calls (cold loads are not timed).
    pub fn slow_call_rate_threshold(mut self, rate: f64) -> Self {
        self.policy.slow_call_rate_threshold = rate;
        self
    }

    /// How long a timed call must take to be slow (1 ms ..= 1 h; default
    /// 10 s). Calls marked as cold loads are never timed, but a warm
    /// request queued behind loads is: in front of servers that load
    /// models on demand, a flood of new models can make most of a
    /// backend's warm calls slow and open its breaker (shedding while the
    /// backend is saturated). Set this above the longest wait a backend's
    /// queue may legitimately hold (a cold load plus its queue) if that is
    /// not what you want.
    pub fn slow_call_duration(mut self, duration: Duration) -> Self {
        self.policy.slow_call_duration = duration;
        self
    }

    /// Trips at once after `failures` consecutive failures (1 ..= 10 000;
    /// default off), before the window holds its minimum: the fast path
    /// for a hard outage. Overloads (429) neither count nor reset the run.
    pub fn consecutive_failures(mut self, failures: u32) -> Self {
        self.policy.consecutive_failures = Some(failures);
        self
    }

    /// The number of half-open probe calls (1 ..= 1 000; default 3).
    pub fn half_open_permits(mut self, calls: u32) -> Self {
        self.policy.half_open_permits = calls;
        self
    }

    /// The longest a half-open probe round may take (1 ms ..= 1 h; default
    /// 300 s, above most LLM generations): past it, a round whose probes have not all reported opens the
    /// breaker again (for the same wait as before: no doubling) instead of
    /// sticking. A probe's outcome is recorded at the end of its response
    /// body, so set this above your longest call, streams included (an LLM
    /// generating for minutes): a probe still streaming at the deadline
    /// cannot close the breaker.
    pub fn half_open_max_wait(mut self, wait: Duration) -> Self {
        self.policy.half_open_max_wait = wait;
        self
    }

    /// The base open duration (1 ms ..= 1 h; default 5 s). The `n`-th
    /// reopening in a row (from half-open) waits up to `base × 2^n`, at
    /// most [`max_open_duration`](Self::max_open_duration); closing resets
    /// `n` to 0.
    pub fn open_duration(mut self, duration: Duration) -> Self {
        self.policy.open_duration = duration;
        self
    }

    /// The ceiling of the open duration's backoff (`open_duration` ..=
    /// 24 h; default 120 s).
    pub fn max_open_duration(mut self, duration: Duration) -> Self {
        self.policy.max_open_duration = duration;
        self
    }

    /// Whether to draw each open duration uniformly in `[ceiling / 2,
    /// ceiling]` ("equal jitter", AWS Architecture Blog, *Exponential
    /// Backoff And Jitter*, Marc Brooker, 2015), so that the breakers many
    /// gateways keep for one backend do not all probe it at once (default
    /// on). The floor is half the ceiling: a breaker set to open for 5 s
    /// stays open at least 2.5 s (full jitter's `(0, ceiling]` opened one
    /// for 322 ms). Off, a breaker stays open for the ceiling exactly.
    pub fn jitter(mut self, on: bool) -> Self {
        self.policy.jitter = on;
        self
    }

    /// Validates and returns the policy.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming the first field out of its range.
    pub fn build(self) -> Result<BreakerConfig, InvalidConfig> {
        let mut p = self.policy;
        let within = |d: Duration, lo: Duration, hi: Duration| (lo..=hi).contains(&d);
        const MS: Duration = Duration::from_millis(1);
        const HOUR: Duration = Duration::from_secs(3600);
        let window_calls = match p.window {
            SlidingWindow::Count { calls } => {
                if !(1..=10_000).contains(&calls) {
                    return Err(InvalidConfig::new("window", "1 ..= 10000 calls"));
                }
                calls
            }
            SlidingWindow::Time { duration, buckets } => {
                if !within(duration, Duration::from_millis(100), HOUR) {
                    return Err(InvalidConfig::new(
                        "time_window",
                        "a duration of 100 ms ..= 1 h",
                    ));
                }
                if !(1..=100).contains(&buckets) || duration / buckets < MS {
                    return Err(InvalidConfig::new(
                        "time_window",
                        "1 ..= 100 buckets, each at least 1 ms",
                    ));
                }
                10_000
            }
        };
        if !self.minimum_calls_set {
            p.minimum_calls = p.minimum_calls.min(window_calls);
        }
        if !(1..=window_calls).contains(&p.minimum_calls) {
            return Err(InvalidConfig::new(
                "minimum_calls",
                "1 ..= 10000, and at most the window's calls",
            ));
        }
        let fraction = |rate: f64| rate > 0.0 && rate <= 1.0;
        if !fraction(p.failure_rate_threshold) {
            return Err(InvalidConfig::new(
                "failure_rate_threshold",
                "a fraction in (0, 1]",
            ));
        }
        if !fraction(p.slow_call_rate_threshold) {
            return Err(InvalidConfig::new(
                "slow_call_rate_threshold",
                "a fraction in (0, 1]",
            ));
        }
        if !within(p.slow_call_duration, MS, HOUR) {
            return Err(InvalidConfig::new("slow_call_duration", "1 ms ..= 1 h"));
        }
        if p.consecutive_failures
            .is_some_and(|n| !(1..=10_000).contains(&n))
        {
            return Err(InvalidConfig::new("consecutive_failures", "1 ..= 10000"));
        }
        if !(1..=1_000).contains(&p.half_open_permits) {
            return Err(InvalidConfig::new("half_open_permits", "1 ..= 1000 calls"));
        }
        if !within(p.half_open_max_wait, MS, HOUR) {
            return Err(InvalidConfig::new("half_open_max_wait", "1 ms ..= 1 h"));
        }
        if !within(p.open_duration, MS, HOUR) {
            return Err(InvalidConfig::new("open_duration", "1 ms ..= 1 h"));
        }
        if !within(p.max_open_duration, p.open_duration, 24 * HOUR) {
            return Err(InvalidConfig::new(
                "max_open_duration",
                "open_duration ..= 24 h",
            ));
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests;
