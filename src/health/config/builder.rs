//! [`HealthConfigBuilder`]: each setting checked against its range.

use std::time::Duration;

use super::fields::HealthConfig;
use crate::error::InvalidConfig;

impl HealthConfig {
    /// A builder starting from the defaults.
    pub fn builder() -> HealthConfigBuilder {
        HealthConfigBuilder {
            policy: Self::default(),
            weights: [0.5, 0.33, 0.17],
        }
    }
}

/// Builds a validated [`HealthConfig`].
///
/// ```
/// use std::time::Duration;
/// use tower_model_balance::health::HealthConfig;
///
/// let policy = HealthConfig::builder()
///     .weights(0.6, 0.3, 0.1)
///     .thresholds(0.25, 0.4)
///     .outlier_factor(Some(4.0))
///     .warm_up(Duration::from_secs(30))
///     .build()
///     .unwrap();
/// assert!(format!("{policy:?}").contains("eject_below: 0.25"));
///
/// let err = HealthConfig::builder().thresholds(0.5, 0.3).build().unwrap_err();
/// assert_eq!(err.field, "thresholds");
/// ```
#[derive(Debug, Clone)]
pub struct HealthConfigBuilder {
    pub(super) policy: HealthConfig,
    /// As given, before normalizing.
    pub(super) weights: [f64; 3],
}

impl HealthConfigBuilder {
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

    /// How many times its peers' latency a backend's must be to be
    /// ejected as a latency outlier (1.5 ..= 1 000; default 3.0; `None`:
    /// off). Latency is compared per request in flight (its p99 over its
    /// mean requests in flight), against the median of the other eligible
    /// backends with recent answers: over this factor with 3 peers or
    /// more, over this factor + 1 with one or two, and 50 ms per request
    /// over it; over this factor × its own baseline too; for 5 consecutive
    /// intervals with answers, none failing. With no peer answering, no
    /// backend is a latency outlier. A backend with requests in flight and
    /// no answer for longer than the failure penalty and this factor × its
    /// recent p99, while a peer answers, is one for each interval of
    /// that silence.
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

    /// The slow start of a backend joining a running fleet: its warm-up
    /// weight rises linearly from `warm_up_min_weight` to 1 over this long
    /// of Tokio's clock, as the health task evaluates it (0 ..= 1 h, 0
    /// turns it off; default 10 s).
    pub fn warm_up(mut self, warm_up: Duration) -> Self {
        self.policy.warm_up = warm_up;
        self
    }

    /// The warm-up weight a joining backend starts at ((0, 1]; default
    /// 0.5).
    ///
    /// P2C divides the backend's requests in flight by it: at weight `w`
    /// each request queued there counts `1 / w`, so under load it takes
    /// about `w` of its fair share of the queue, while at light load (an
    /// idle backend, whose next request waits behind nothing) it competes
    /// on its latency estimate and health alone. The default keeps a
    /// joining backend between a fifth and six fifths of its fair share
    /// of the first burst from an idle or a busy fleet: 0.6 and 0.8 in
    /// the balancer's test (`tests/balance/starvation.rs`).
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
    pub fn build(self) -> Result<HealthConfig, InvalidConfig> {
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
                "1.5 ..= 1000, or off (None; 0 in a config file)",
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
