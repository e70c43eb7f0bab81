//! [`HedgeConfig`]: the hedge's validated delay, budget and gate settings.

use std::time::Duration;

use crate::error::InvalidConfig;

/// When to send a backup attempt, and how many may be sent.
///
/// Built with [`HedgeConfig::builder`]; [`HedgeConfigBuilder::build`]
/// validates every value and names the first field out of range. Defaults:
///
/// | field | default | range |
/// | --- | --- | --- |
/// | `percentile` (fraction) | 0.95 | [0.5, 0.9999] |
/// | `median_factor` (delay at most this × the median) | 2.0 | [1, 1 000] |
/// | `window` (rotated in two halves) | 10 s | 100 ms ..= 1 h |
/// | `min_samples` (per model, in the window) | 20 | 0 ..= 1 000 000 |
/// | `floor` | 1 ms | 0 ..= `ceiling` |
/// | `ceiling` | 2 s | `floor` ..= 1 h, and above 0 |
/// | `max_models` (tracked apart) | 64 | 1 ..= 4 096 |
/// | `budget_ratio` (extra attempts ÷ requests) | 0.05 | [0, 1] |
/// | `budget_window` (in 10 buckets) | 10 s | 1 s ..= 1 h |
/// | `budget_min_per_sec` (the floor, extra attempts a second) | 10 | 0 ..= 100 000 |
/// | `max_attempts` | 2 | 1 ..= 2 |
/// | `max_utilization` (load gate) | 0.8 | (0, 100] |
///
/// The delay is the `percentile` of the model's latency over the last
/// `window` (between half of it and all of it: the window is kept in two
/// halves and the older half is dropped as a new one starts), clamped to
/// `[floor, ceiling]`, and at most `median_factor` × its median: a model
/// whose p95 falls in its slow mode (more than 5% of its requests slow, as
/// when one slow backend serves it) still hedges the slow ones. A model with fewer than `min_samples` samples in the
/// window is not hedged (with `min_samples` 0 and no sample, the delay is
/// the floor). Up to `max_models` models are tracked apart, each in
/// a window of one of the two sets of 8 its ID's hash picks; a window
/// unused for a whole `window` goes to the next model that needs one, so
/// the models tracked follow the traffic. The rest share one histogram. A
/// catalogue of up to about 5/8 of `max_models` is tracked whole (0 of 40
/// models shared in 1,000 random catalogues for 64 windows; 2.5 of 64 on
/// average). Hedges and retries drawn from the budget are at most
/// `budget_ratio` of the requests counted in the last `budget_window`, plus
/// `budget_min_per_sec` × its seconds (the floor of Finagle's
/// `RetryBudget`, tower's `TpsBudget` and Linkerd's, 10 a second in each). No
/// hedge is sent while the [load gate](super::LoadGate) reports a
/// utilization above `max_utilization`. `max_attempts` 1 never hedges (the
/// layer then only measures).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HedgeConfig {
    pub(crate) percentile: f64,
    pub(crate) median_factor: f64,
    pub(crate) window: Duration,
    pub(crate) min_samples: u64,
    pub(crate) floor: Duration,
    pub(crate) ceiling: Duration,
    pub(crate) max_models: usize,
    pub(crate) budget_ratio: f64,
    pub(crate) budget_window: Duration,
    pub(crate) budget_min_per_sec: u32,
    pub(crate) max_attempts: usize,
    pub(crate) max_utilization: f64,
}

impl Default for HedgeConfig {
    fn default() -> Self {
        Self {
            percentile: 0.95,
            median_factor: 2.0,
            window: Duration::from_secs(10),
            min_samples: 20,
            floor: Duration::from_millis(1),
            ceiling: Duration::from_secs(2),
            max_models: 64,
            budget_ratio: 0.05,
            budget_window: Duration::from_secs(10),
            budget_min_per_sec: 10,
            max_attempts: 2,
            max_utilization: 0.8,
        }
    }
}

impl HedgeConfig {
    /// A builder starting from the defaults.
    pub fn builder() -> HedgeConfigBuilder {
        HedgeConfigBuilder {
            policy: Self::default(),
        }
    }
}

/// Builds a validated [`HedgeConfig`].
///
/// ```
/// use std::time::Duration;
/// use tower_model_balance::hedge::HedgeConfig;
///
/// let policy = HedgeConfig::builder()
///     .percentile(0.9)
///     .floor(Duration::from_millis(5))
///     .ceiling(Duration::from_millis(500))
///     .budget_ratio(0.02)
///     .build()
///     .unwrap();
/// assert_ne!(policy, HedgeConfig::default());
/// assert_eq!(HedgeConfig::builder().build().unwrap(), HedgeConfig::default());
///
/// let err = HedgeConfig::builder().budget_ratio(1.5).build().unwrap_err();
/// assert_eq!(err.field, "budget_ratio");
/// ```
#[derive(Debug, Clone)]
pub struct HedgeConfigBuilder {
    policy: HedgeConfig,
}

impl HedgeConfigBuilder {
    /// The latency percentile the delay is set at, as a fraction in
    /// [0.5, 0.9999] (default 0.95: Dean and Barroso's "defer sending a
    /// secondary request until the first has been outstanding for more than
    /// the 95th-percentile expected latency").
    pub fn percentile(mut self, fraction: f64) -> Self {
        self.policy.percentile = fraction;
        self
    }

    /// The most the delay may be, as a multiple of the model's median
    /// latency in the window, in [1, 1 000] (default 2; 1 000 turns the cap
    /// off in practice). Where latencies spread wide (generations of very
    /// different lengths), more requests pass twice the median than 5%: the
    /// budget then bounds the hedges; raise the factor to hedge fewer. Dean and Barroso's rule assumes slowness strikes
    /// requests at random; when a model's slow share exceeds `1 −
    /// percentile` (a model served by one degraded backend), its p95 lies in
    /// the slow mode and a hedge at p95 comes too late to help.
    pub fn median_factor(mut self, factor: f64) -> Self {
        self.policy.median_factor = factor;
        self
    }

    /// The latency window, 100 ms ..= 1 h (default 10 s), kept in two
    /// halves: the delay reads the last half-window to whole window.
    pub fn window(mut self, window: Duration) -> Self {
        self.policy.window = window;
        self
    }

    /// Samples a model needs in the window before it is hedged, 0 ..=
    /// 1 000 000 (default 20).
    pub fn min_samples(mut self, samples: u64) -> Self {
        self.policy.min_samples = samples;
        self
    }

    /// The shortest delay, at most the ceiling (default 1 ms).
    pub fn floor(mut self, floor: Duration) -> Self {
        self.policy.floor = floor;
        self
    }

    /// The longest delay, above 0 and at most 1 h (default 2 s).
    pub fn ceiling(mut self, ceiling: Duration) -> Self {
        self.policy.ceiling = ceiling;
        self
    }

    /// Models whose latency is tracked apart at once (windows kept), 1 ..=
    /// 4 096 (default 64); see the [policy docs](HedgeConfig) for which.
    pub fn max_models(mut self, models: usize) -> Self {
        self.policy.max_models = models;
        self
    }

    /// Extra attempts (hedges and retries) allowed per request counted, a
    /// fraction in [0, 1] (default 0.05; see
    /// [`budget_min_per_sec`](Self::budget_min_per_sec) for the floor).
    pub fn budget_ratio(mut self, ratio: f64) -> Self {
        self.policy.budget_ratio = ratio;
        self
    }

    /// The window the budget counts over, 1 s ..= 1 h (default 10 s).
    pub fn budget_window(mut self, window: Duration) -> Self {
        self.policy.budget_window = window;
        self
    }

    /// Extra attempts allowed a second whatever the traffic, 0 ..= 100 000
    /// (default 10, as in Finagle, tower and Linkerd): at low traffic a
    /// share of the requests is less than one retry. 0 with a
    /// `budget_ratio` of 0 never hedges nor retries.
    pub fn budget_min_per_sec(mut self, per_sec: u32) -> Self {
        self.policy.budget_min_per_sec = per_sec;
        self
    }

    /// Attempts per request, the first included: 1 ..= 2 (default 2).
    pub fn max_attempts(mut self, attempts: usize) -> Self {
        self.policy.max_attempts = attempts;
        self
    }

    /// The utilization (in-flight ÷ capacity, as the load gate reports it)
    /// above which no hedge is sent, in (0, 100] (default 0.8).
    pub fn max_utilization(mut self, utilization: f64) -> Self {
        self.policy.max_utilization = utilization;
        self
    }

    /// Validates the policy.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming the first field out of its range.
    pub fn build(self) -> Result<HedgeConfig, InvalidConfig> {
        let p = self.policy;
        const HOUR: Duration = Duration::from_secs(3600);
        if !(0.5..=0.9999).contains(&p.percentile) {
            return Err(InvalidConfig::new(
                "percentile",
                "a fraction in [0.5, 0.9999]",
            ));
        }
        if !(1.0..=1_000.0).contains(&p.median_factor) {
            return Err(InvalidConfig::new("median_factor", "in [1, 1000]"));
        }
        if !(Duration::from_millis(100)..=HOUR).contains(&p.window) {
            return Err(InvalidConfig::new("window", "100 ms ..= 1 h"));
        }
        if p.min_samples > 1_000_000 {
            return Err(InvalidConfig::new("min_samples", "0 ..= 1000000"));
        }
        if p.ceiling.is_zero() || p.ceiling > HOUR {
            return Err(InvalidConfig::new("ceiling", "above 0 and at most 1 h"));
        }
        if p.floor > p.ceiling {
            return Err(InvalidConfig::new("floor", "at most the ceiling"));
        }
        if !(1..=4096).contains(&p.max_models) {
            return Err(InvalidConfig::new("max_models", "1 ..= 4096"));
        }
        if !(0.0..=1.0).contains(&p.budget_ratio) {
            return Err(InvalidConfig::new("budget_ratio", "a fraction in [0, 1]"));
        }
        if !(Duration::from_secs(1)..=HOUR).contains(&p.budget_window) {
            return Err(InvalidConfig::new("budget_window", "1 s ..= 1 h"));
        }
        if p.budget_min_per_sec > 100_000 {
            return Err(InvalidConfig::new("budget_min_per_sec", "0 ..= 100000"));
        }
        if !(1..=2).contains(&p.max_attempts) {
            return Err(InvalidConfig::new("max_attempts", "1 ..= 2"));
        }
        if !(p.max_utilization > 0.0 && p.max_utilization <= 100.0) {
            return Err(InvalidConfig::new("max_utilization", "in (0, 100]"));
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_each_bound_is_named() {
        assert_eq!(
            HedgeConfig::builder().build().unwrap(),
            HedgeConfig::default()
        );
        let ms = Duration::from_millis;
        let cases: Vec<(HedgeConfigBuilder, &str)> = vec![
            (HedgeConfig::builder().percentile(0.4), "percentile"),
            (HedgeConfig::builder().percentile(f64::NAN), "percentile"),
            (HedgeConfig::builder().median_factor(0.5), "median_factor"),
            (HedgeConfig::builder().window(ms(99)), "window"),
            (HedgeConfig::builder().min_samples(1_000_001), "min_samples"),
            (HedgeConfig::builder().ceiling(Duration::ZERO), "ceiling"),
            (HedgeConfig::builder().floor(ms(10)).ceiling(ms(5)), "floor"),
            (HedgeConfig::builder().max_models(0), "max_models"),
            (HedgeConfig::builder().budget_ratio(-0.1), "budget_ratio"),
            (
                HedgeConfig::builder().budget_ratio(f64::NAN),
                "budget_ratio",
            ),
            (
                HedgeConfig::builder().budget_window(ms(999)),
                "budget_window",
            ),
            (
                HedgeConfig::builder().budget_min_per_sec(100_001),
                "budget_min_per_sec",
            ),
            (HedgeConfig::builder().max_attempts(3), "max_attempts"),
            (HedgeConfig::builder().max_attempts(0), "max_attempts"),
            (
                HedgeConfig::builder().max_utilization(0.0),
                "max_utilization",
            ),
            (
                HedgeConfig::builder().max_utilization(f64::INFINITY),
                "max_utilization",
            ),
        ];
        for (builder, field) in cases {
            assert_eq!(builder.build().unwrap_err().field, field);
        }
    }
}
