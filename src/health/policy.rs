//! The health policy: score weights, smoothing, thresholds and ejection
//! limits, validated.

use std::time::Duration;

use crate::error::InvalidConfig;

/// How backend health is scored and when a backend is ejected.
///
/// Built with [`HealthPolicy::builder`]; [`HealthPolicyBuilder::build`]
/// validates every value and names the first field out of range.
///
/// | field | default | range |
/// | --- | --- | --- |
/// | `weights` (latency, capacity, connection) | 0.5, 0.33, 0.17 | each in 0 ..= 1 000 000, sum > 0 (normalized to sum 1) |
/// | `interval` (evaluation period) | 1 s | 10 ms ..= 60 s |
/// | `error_alpha` (weight of one outcome in the error rate) | 0.2 | (0, 1] |
/// | `latency_alpha` (weight of one interval's p99) | 0.3 | (0, 1] |
/// | `failure_penalty` (latency a failure counts as) | 1 s | 1 ms ..= 1 h |
/// | `relax_half_life` (no data: back toward neutral) | 10 s | 100 ms ..= 1 h |
/// | `eject_below` / `readmit_above` (hysteresis) | 0.2 / 0.35 | 0 ≤ eject < readmit < 1 |
/// | `queue_scale` (queue depth that halves the queue term, requests) | 8 | 0.1 ..= 1 000 000 |
/// | `connections` (full below, zero at; requests in flight) | 100, 600 | 1 ≤ full < zero ≤ 1 000 000 |
/// | `outlier_factor` (p99 over baseline that ejects) | 5.0 | 1.5 ..= 1 000, or off |
/// | `outlier_ejection` (base ejection time, × consecutive ejections up to 10) | 30 s | 100 ms ..= 1 h |
/// | `max_ejected_share` (of backends, at least one) | 0.3 | 0 ..= 1 (0: never eject) |
/// | `warm_up` (slow start of a backend that joins later) | 10 s | 0 ..= 1 h (0: off) |
/// | `warm_up_min_weight` | 0.5 | (0, 1] |
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HealthPolicy {
    /// Latency, capacity and connection weights, normalized to sum 1.
    pub(crate) weights: [f64; 3],
    pub(crate) interval: Duration,
    pub(crate) error_alpha: f64,
    pub(crate) latency_alpha: f64,
    pub(crate) failure_penalty: Duration,
    pub(crate) relax_half_life: Duration,
    pub(crate) eject_below: f64,
    pub(crate) readmit_above: f64,
    pub(crate) queue_scale: f64,
    pub(crate) connections: (u32, u32),
    pub(crate) outlier_factor: Option<f64>,
    pub(crate) outlier_ejection: Duration,
    pub(crate) max_ejected_share: f64,
    pub(crate) warm_up: Duration,
    pub(crate) warm_up_min_weight: f64,
}

impl Default for HealthPolicy {
    fn default() -> Self {
        Self {
            weights: [0.5, 0.33, 0.17],
            interval: Duration::from_secs(1),
            error_alpha: 0.2,
            latency_alpha: 0.3,
            failure_penalty: Duration::from_secs(1),
            relax_half_life: Duration::from_secs(10),
            eject_below: 0.2,
            readmit_above: 0.35,
            queue_scale: 8.0,
            connections: (100, 600),
            outlier_factor: Some(5.0),
            outlier_ejection: Duration::from_secs(30),
            max_ejected_share: 0.3,
            warm_up: Duration::from_secs(10),
            warm_up_min_weight: 0.5,
        }
    }
}

impl HealthPolicy {
    /// A builder starting from the defaults.
    pub fn builder() -> HealthPolicyBuilder {
        HealthPolicyBuilder {
            policy: Self::default(),
            weights: [0.5, 0.33, 0.17],
        }
    }

    /// The latency, capacity and connection weights, normalized to sum 1.
    pub fn weights(&self) -> [f64; 3] {
        self.weights
    }

    /// How often outcomes are folded into scores.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Weight of one outcome (request or probe) in the error-rate EWMA.
    pub fn error_alpha(&self) -> f64 {
        self.error_alpha
    }

    /// Weight of one interval's p99 latency in its EWMA.
    pub fn latency_alpha(&self) -> f64 {
        self.latency_alpha
    }

    /// The latency a failure counts as (when it failed faster).
    pub fn failure_penalty(&self) -> Duration {
        self.failure_penalty
    }

    /// Half-life of the relaxation toward neutral while no data comes.
    pub fn relax_half_life(&self) -> Duration {
        self.relax_half_life
    }

    /// Score below which an eligible backend is ejected.
    pub fn eject_below(&self) -> f64 {
        self.eject_below
    }

    /// Score above which an ejected backend is readmitted.
    pub fn readmit_above(&self) -> f64 {
        self.readmit_above
    }

    /// Queue depth (requests waiting) at which the queue term is one half.
    pub fn queue_scale(&self) -> f64 {
        self.queue_scale
    }

    /// In-flight requests below which the connection term is 1, and at
    /// which it reaches 0.
    pub fn connections(&self) -> (u32, u32) {
        self.connections
    }

    /// p99 latency over the backend's baseline at which it is ejected as a
    /// latency outlier, if on.
    pub fn outlier_factor(&self) -> Option<f64> {
        self.outlier_factor
    }

    /// Base ejection time of a latency outlier.
    pub fn outlier_ejection(&self) -> Duration {
        self.outlier_ejection
    }

    /// The largest share of backends ejected at once (at least one is
    /// allowed unless the share is 0).
    pub fn max_ejected_share(&self) -> f64 {
        self.max_ejected_share
    }

    /// The slow start of a backend that joins a running fleet.
    pub fn warm_up(&self) -> Duration {
        self.warm_up
    }

    /// The cost weight a joining backend starts its warm-up at.
    pub fn warm_up_min_weight(&self) -> f64 {
        self.warm_up_min_weight
    }

    /// How many of `n` backends may be ejected at once.
    pub(crate) fn max_ejected(&self, n: usize) -> usize {
        if self.max_ejected_share <= 0.0 {
            return 0;
        }
        ((self.max_ejected_share * n as f64).floor() as usize).clamp(1.min(n), n)
    }
}

/// Builds a validated [`HealthPolicy`].
///
/// ```
/// use std::time::Duration;
/// use tower_model_balance::health::HealthPolicy;
///
/// let policy = HealthPolicy::builder()
///     .weights(0.6, 0.3, 0.1)
///     .thresholds(0.25, 0.4)
///     .outlier_factor(Some(4.0))
///     .warm_up(Duration::from_secs(30))
///     .build()
///     .unwrap();
/// assert_eq!(policy.eject_below(), 0.25);
///
/// let err = HealthPolicy::builder().thresholds(0.5, 0.3).build().unwrap_err();
/// assert_eq!(err.field, "thresholds");
/// ```
#[derive(Debug, Clone)]
pub struct HealthPolicyBuilder {
    policy: HealthPolicy,
    /// As given, before normalizing.
    weights: [f64; 3],
}

impl HealthPolicyBuilder {
    /// The weights of the latency, capacity and connection terms (each in
    /// 0 ..= 1 000 000, sum > 0; normalized to sum 1; default 0.5, 0.33,
    /// 0.17).
    pub fn weights(mut self, latency: f64, capacity: f64, connection: f64) -> Self {
        self.weights = [latency, capacity, connection];
        self
    }

    /// How often outcomes are folded into scores (10 ms ..= 60 s; default
    /// 1 s).
    pub fn interval(mut self, interval: Duration) -> Self {
        self.policy.interval = interval;
        self
    }

    /// Weight of one outcome in the error-rate EWMA ((0, 1]; default 0.2,
    /// the original design's).
    pub fn error_alpha(mut self, alpha: f64) -> Self {
        self.policy.error_alpha = alpha;
        self
    }

    /// Weight of one interval's p99 latency in its EWMA ((0, 1]; default
    /// 0.3).
    pub fn latency_alpha(mut self, alpha: f64) -> Self {
        self.policy.latency_alpha = alpha;
        self
    }

    /// The latency a failure counts as when it failed faster (1 ms ..=
    /// 1 h; default 1 s).
    pub fn failure_penalty(mut self, penalty: Duration) -> Self {
        self.policy.failure_penalty = penalty;
        self
    }

    /// Half-life of the relaxation toward neutral while no outcome comes
    /// (100 ms ..= 1 h; default 10 s).
    pub fn relax_half_life(mut self, half_life: Duration) -> Self {
        self.policy.relax_half_life = half_life;
        self
    }

    /// Hysteresis: an eligible backend is ejected when its ejection score
    /// (the score with the load terms at neutral) falls below
    /// `eject_below`, an ejected one readmitted above `readmit_above` (0 ≤
    /// eject < readmit < 1, so that a recovered backend can come back;
    /// default 0.2 and 0.35).
    pub fn thresholds(mut self, eject_below: f64, readmit_above: f64) -> Self {
        self.policy.eject_below = eject_below;
        self.policy.readmit_above = readmit_above;
        self
    }

    /// The queue depth (requests waiting) at which the queue term is one
    /// half (0.1 ..= 1 000 000; default 8).
    pub fn queue_scale(mut self, requests: f64) -> Self {
        self.policy.queue_scale = requests;
        self
    }

    /// The connection term is 1 below `full_below` requests in flight and
    /// falls linearly to 0 at `zero_at` (1 ≤ full_below < zero_at ≤
    /// 1 000 000; default 100 and 600).
    pub fn connections(mut self, full_below: u32, zero_at: u32) -> Self {
        self.policy.connections = (full_below, zero_at);
        self
    }

    /// The p99 latency over the backend's own baseline at which it is
    /// ejected as a latency outlier, once its smoothed p99 stayed over it
    /// — and over 3× the fleet's median p99 — for 5 consecutive
    /// intervals with data (1.5 ..= 1 000; default 5.0; `None`: off).
    pub fn outlier_factor(mut self, factor: Option<f64>) -> Self {
        self.policy.outlier_factor = factor;
        self
    }

    /// Base ejection time of a latency outlier, multiplied by its
    /// consecutive ejections up to 10 (100 ms ..= 1 h; default 30 s).
    pub fn outlier_ejection(mut self, duration: Duration) -> Self {
        self.policy.outlier_ejection = duration;
        self
    }

    /// The largest share of backends ejected at once, by score and as
    /// outliers together; at least one may be unless the share is 0 (0 ..=
    /// 1; default 0.3). A backend past the cap stays eligible: its low
    /// score steers P2C away from it (updates, and the choice among a
    /// model's owners), but it stays its models' owner, and only its
    /// breaker keeps failing requests off it.
    pub fn max_ejected_share(mut self, share: f64) -> Self {
        self.policy.max_ejected_share = share;
        self
    }

    /// The slow start of a backend joining a running fleet: its cost
    /// weight rises linearly from `warm_up_min_weight` to 1 over this long
    /// (0 ..= 1 h, 0 turns it off; default 10 s).
    pub fn warm_up(mut self, warm_up: Duration) -> Self {
        self.policy.warm_up = warm_up;
        self
    }

    /// The cost weight a joining backend starts its warm-up at ((0, 1];
    /// default 0.5).
    ///
    /// P2C divides the cost by it, so a backend at weight `w` takes about
    /// `w` of its fair share of a burst from a fleet as idle as it is, and
    /// somewhat more from a busy fleet (its queue is empty, theirs are
    /// not). The default keeps a joining backend between a fifth and six
    /// fifths of its fair share of the first burst either way: 0.5 and
    /// 0.8 in the balancer's test (`tests/starvation.rs`), against 0.1 and
    /// 0.1 at the former default 0.1 (starved), and 1.1 and 1.4 at 1
    /// (flooded from a busy fleet).
    pub fn warm_up_min_weight(mut self, weight: f64) -> Self {
        self.policy.warm_up_min_weight = weight;
        self
    }

    /// Validates and builds.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming the first field out of the range its
    /// builder method documents.
    pub fn build(self) -> Result<HealthPolicy, InvalidConfig> {
        let mut p = self.policy;
        let fraction = |x: f64| x > 0.0 && x <= 1.0;
        let within = |d: Duration, lo: Duration, hi: Duration| d >= lo && d <= hi;
        let ms = Duration::from_millis;
        let secs = Duration::from_secs;
        let sum: f64 = self.weights.iter().sum();
        if !(self.weights.iter().all(|w| (0.0..=1e6).contains(w)) && sum > 0.0) {
            return Err(InvalidConfig::new(
                "weights",
                "each in 0 ..= 1 000 000, sum > 0",
            ));
        }
        // Weights that already sum to 1 (to within rounding) are kept as
        // given: dividing by a sum of 1.0000000000000002 would change them
        // in the last digit, and again each time they are read back.
        p.weights = if (sum - 1.0).abs() <= 1e-9 {
            self.weights
        } else {
            self.weights.map(|w| w / sum)
        };
        if !within(p.interval, ms(10), secs(60)) {
            return Err(InvalidConfig::new("interval", "10 ms ..= 60 s"));
        }
        if !fraction(p.error_alpha) {
            return Err(InvalidConfig::new("error_alpha", "(0, 1]"));
        }
        if !fraction(p.latency_alpha) {
            return Err(InvalidConfig::new("latency_alpha", "(0, 1]"));
        }
        if !within(p.failure_penalty, ms(1), secs(3600)) {
            return Err(InvalidConfig::new("failure_penalty", "1 ms ..= 1 h"));
        }
        if !within(p.relax_half_life, ms(100), secs(3600)) {
            return Err(InvalidConfig::new("relax_half_life", "100 ms ..= 1 h"));
        }
        if !(p.eject_below >= 0.0 && p.eject_below < p.readmit_above && p.readmit_above < 1.0) {
            return Err(InvalidConfig::new(
                "thresholds",
                "0 <= eject_below < readmit_above < 1",
            ));
        }
        if !(0.1..=1e6).contains(&p.queue_scale) {
            return Err(InvalidConfig::new("queue_scale", "0.1 ..= 1 000 000"));
        }
        let (full, zero) = p.connections;
        if !(full >= 1 && full < zero && zero <= 1_000_000) {
            return Err(InvalidConfig::new(
                "connections",
                "1 <= full_below < zero_at <= 1 000 000",
            ));
        }
        if p.outlier_factor
            .is_some_and(|f| !(1.5..=1000.0).contains(&f))
        {
            return Err(InvalidConfig::new(
                "outlier_factor",
                "1.5 ..= 1000, or None",
            ));
        }
        if !within(p.outlier_ejection, ms(100), secs(3600)) {
            return Err(InvalidConfig::new("outlier_ejection", "100 ms ..= 1 h"));
        }
        if !(0.0..=1.0).contains(&p.max_ejected_share) {
            return Err(InvalidConfig::new("max_ejected_share", "0 ..= 1"));
        }
        if p.warm_up > secs(3600) {
            return Err(InvalidConfig::new("warm_up", "0 ..= 1 h"));
        }
        if !fraction(p.warm_up_min_weight) {
            return Err(InvalidConfig::new("warm_up_min_weight", "(0, 1]"));
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_build_and_weights_are_normalized() {
        let p = HealthPolicy::builder().build().unwrap();
        assert_eq!(p, HealthPolicy::default());
        let p = HealthPolicy::builder()
            .weights(2.0, 1.0, 1.0)
            .build()
            .unwrap();
        assert_eq!(p.weights(), [0.5, 0.25, 0.25]);
    }

    #[test]
    fn every_field_out_of_range_is_named() {
        let b = HealthPolicy::builder;
        let cases = [
            (b().weights(0.0, 0.0, 0.0), "weights"),
            (b().weights(f64::NAN, 1.0, 1.0), "weights"),
            (b().weights(-1.0, 1.0, 1.0), "weights"),
            (b().interval(Duration::ZERO), "interval"),
            (b().error_alpha(0.0), "error_alpha"),
            (b().latency_alpha(1.5), "latency_alpha"),
            (b().failure_penalty(Duration::ZERO), "failure_penalty"),
            (
                b().relax_half_life(Duration::from_millis(1)),
                "relax_half_life",
            ),
            (b().thresholds(0.3, 0.3), "thresholds"),
            (b().thresholds(-0.1, 0.3), "thresholds"),
            (b().thresholds(0.2, f64::NAN), "thresholds"),
            (b().thresholds(0.5, 1.0), "thresholds"),
            (b().weights(f64::MAX, f64::MAX, 1.0), "weights"),
            (b().queue_scale(0.0), "queue_scale"),
            (b().connections(0, 10), "connections"),
            (b().connections(10, 10), "connections"),
            (b().outlier_factor(Some(1.0)), "outlier_factor"),
            (b().outlier_ejection(Duration::ZERO), "outlier_ejection"),
            (b().max_ejected_share(1.5), "max_ejected_share"),
            (b().warm_up(Duration::from_secs(7200)), "warm_up"),
            (b().warm_up_min_weight(0.0), "warm_up_min_weight"),
        ];
        for (builder, field) in cases {
            assert_eq!(builder.build().unwrap_err().field, field);
        }
    }

    #[test]
    fn at_least_one_backend_may_be_ejected_unless_the_share_is_zero() {
        let p = HealthPolicy::default();
        assert_eq!(p.max_ejected(0), 0);
        assert_eq!(p.max_ejected(1), 1);
        assert_eq!(p.max_ejected(8), 2);
        assert_eq!(p.max_ejected(100), 30);
        let none = HealthPolicy::builder()
            .max_ejected_share(0.0)
            .build()
            .unwrap();
        assert_eq!(none.max_ejected(8), 0);
    }
}
