//! The breaker's policy: validated thresholds, window and durations.

use std::time::Duration;

use crate::error::InvalidConfig;

/// When a breaker trips, how long it stays open and how it probes.
///
/// Built with [`Policy::builder`]; every value is validated by
/// [`PolicyBuilder::build`]. Defaults (in the manner of resilience4j, scaled
/// to an inference backend's request rate):
///
/// | field | default | range |
/// | --- | --- | --- |
/// | `window` (calls) | 20 | 1 ..= 10 000 |
/// | `minimum_calls` | 10 | 1 ..= `window` |
/// | `failure_rate_threshold` (fraction) | 0.5 | (0, 1] |
/// | `open_duration` | 5 s | 1 ms ..= 1 h |
/// | `half_open_permits` (calls) | 3 | 1 ..= 1 000 |
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Policy {
    /// Size of the count-based sliding window: the last `window` recorded
    /// calls decide the failure rate.
    pub(crate) window: usize,
    /// Calls the window must hold before the failure rate can trip the
    /// breaker, so one or two blips never do.
    pub(crate) minimum_calls: usize,
    /// Failure rate, in `(0, 1]`, at or above which the breaker opens.
    pub(crate) failure_rate_threshold: f64,
    /// How long the breaker stays open before it lets probes through.
    pub(crate) open_duration: Duration,
    /// Calls let through while half-open; their failure rate below the
    /// threshold closes the breaker, at or above it opens it again.
    pub(crate) half_open_permits: u32,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            window: 20,
            minimum_calls: 10,
            failure_rate_threshold: 0.5,
            open_duration: Duration::from_secs(5),
            half_open_permits: 3,
        }
    }
}

impl Policy {
    /// Size of the count-based sliding window, in calls.
    pub fn window(&self) -> usize {
        self.window
    }

    /// Calls the window must hold before the failure rate can trip.
    pub fn minimum_calls(&self) -> usize {
        self.minimum_calls
    }

    /// Failure rate in `(0, 1]` at or above which the breaker opens.
    pub fn failure_rate_threshold(&self) -> f64 {
        self.failure_rate_threshold
    }

    /// How long the breaker stays open.
    pub fn open_duration(&self) -> Duration {
        self.open_duration
    }

    /// Probe calls let through while half-open.
    pub fn half_open_permits(&self) -> u32 {
        self.half_open_permits
    }

    /// A builder starting from the defaults.
    pub fn builder() -> PolicyBuilder {
        PolicyBuilder {
            policy: Policy::default(),
        }
    }
}

/// Builds a validated [`Policy`].
///
/// ```
/// use std::time::Duration;
/// use tower_model_balance::breaker::Policy;
///
/// let policy = Policy::builder()
///     .window(50)
///     .minimum_calls(20)
///     .failure_rate_threshold(0.25)
///     .open_duration(Duration::from_secs(10))
///     .build()
///     .unwrap();
/// assert_eq!(policy.half_open_permits(), 3);
///
/// let err = Policy::builder().failure_rate_threshold(1.5).build().unwrap_err();
/// assert_eq!(err.field, "failure_rate_threshold");
/// ```
#[derive(Debug, Clone)]
pub struct PolicyBuilder {
    policy: Policy,
}

impl PolicyBuilder {
    /// Sets the sliding window size in calls (1 ..= 10 000; default 20).
    pub fn window(mut self, calls: usize) -> Self {
        self.policy.window = calls;
        self
    }

    /// Sets the minimum number of calls before tripping (1 ..= `window`;
    /// default 10).
    pub fn minimum_calls(mut self, calls: usize) -> Self {
        self.policy.minimum_calls = calls;
        self
    }

    /// Sets the failure-rate threshold, a fraction in `(0, 1]` (default 0.5).
    pub fn failure_rate_threshold(mut self, rate: f64) -> Self {
        self.policy.failure_rate_threshold = rate;
        self
    }

    /// Sets how long the breaker stays open (1 ms ..= 1 h; default 5 s).
    pub fn open_duration(mut self, duration: Duration) -> Self {
        self.policy.open_duration = duration;
        self
    }

    /// Sets the number of half-open probe calls (1 ..= 1 000; default 3).
    pub fn half_open_permits(mut self, calls: u32) -> Self {
        self.policy.half_open_permits = calls;
        self
    }

    /// Validates and returns the policy.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming the first field out of its range.
    pub fn build(self) -> Result<Policy, InvalidConfig> {
        let p = self.policy;
        if !(1..=10_000).contains(&p.window) {
            return Err(InvalidConfig::new("window", "1 ..= 10000 calls"));
        }
        if !(1..=p.window).contains(&p.minimum_calls) {
            return Err(InvalidConfig::new("minimum_calls", "1 ..= window"));
        }
        let rate = p.failure_rate_threshold;
        if !(rate > 0.0 && rate <= 1.0) {
            return Err(InvalidConfig::new(
                "failure_rate_threshold",
                "a fraction in (0, 1]",
            ));
        }
        if !(Duration::from_millis(1)..=Duration::from_secs(3600)).contains(&p.open_duration) {
            return Err(InvalidConfig::new("open_duration", "1 ms ..= 1 h"));
        }
        if !(1..=1_000).contains(&p.half_open_permits) {
            return Err(InvalidConfig::new("half_open_permits", "1 ..= 1000 calls"));
        }
        Ok(p)
    }
}
