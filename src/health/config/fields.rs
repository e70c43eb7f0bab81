//! [`HealthConfig`]: the validated values, their defaults, and the getters
//! the scores read (the builder is in [`builder`](super::builder)).

use std::time::Duration;

/// How backend health is scored and when a backend is ejected.
///
/// Built with [`HealthConfig::builder`]; [`HealthConfigBuilder::build`](super::HealthConfigBuilder::build)
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
/// | `outlier_factor` (latency per request in flight over peers' and own baseline that ejects) | 3.0 | 1.5 ..= 1 000, or off |
/// | `outlier_ejection` (base ejection time, × consecutive ejections up to 10) | 30 s | 100 ms ..= 1 h |
/// | `max_ejected_share` (of backends, at least one) | 0.3 | 0 ..= 1 (0: never eject) |
/// | `warm_up` (slow start of a backend that joins later) | 10 s | 0 ..= 1 h (0: off) |
/// | `warm_up_min_weight` | 0.5 | (0, 1] |
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HealthConfig {
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

impl Default for HealthConfig {
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
            outlier_factor: Some(3.0),
            outlier_ejection: Duration::from_secs(30),
            max_ejected_share: 0.3,
            warm_up: Duration::from_secs(10),
            warm_up_min_weight: 0.5,
        }
    }
}

#[cfg_attr(not(feature = "config"), allow(dead_code))]
impl HealthConfig {
    /// The latency, capacity and connection weights, normalized to sum 1.
    pub(crate) fn weights(&self) -> [f64; 3] {
        self.weights
    }

    /// How often outcomes are folded into scores.
    pub(crate) fn interval(&self) -> Duration {
        self.interval
    }

    /// Weight of one outcome (request or probe) in the error-rate EWMA.
    pub(crate) fn error_alpha(&self) -> f64 {
        self.error_alpha
    }

    /// Weight of one interval's p99 latency in its EWMA.
    pub(crate) fn latency_alpha(&self) -> f64 {
        self.latency_alpha
    }

    /// The latency a failure counts as (when it failed faster).
    pub(crate) fn failure_penalty(&self) -> Duration {
        self.failure_penalty
    }

    /// Half-life of the relaxation toward neutral while no data comes.
    pub(crate) fn relax_half_life(&self) -> Duration {
        self.relax_half_life
    }

    /// Score below which an eligible backend is ejected.
    pub(crate) fn eject_below(&self) -> f64 {
        self.eject_below
    }

    /// Score above which an ejected backend is readmitted.
    pub(crate) fn readmit_above(&self) -> f64 {
        self.readmit_above
    }

    /// Queue depth (requests waiting) at which the queue term is one half.
    pub(crate) fn queue_scale(&self) -> f64 {
        self.queue_scale
    }

    /// In-flight requests below which the connection term is 1, and at
    /// which it reaches 0.
    pub(crate) fn connections(&self) -> (u32, u32) {
        self.connections
    }

    /// Latency per request in flight over the peers' median (and the
    /// backend's own baseline) at which it is ejected as a latency
    /// outlier, if on.
    pub(crate) fn outlier_factor(&self) -> Option<f64> {
        self.outlier_factor
    }

    /// Base ejection time of a latency outlier.
    pub(crate) fn outlier_ejection(&self) -> Duration {
        self.outlier_ejection
    }

    /// The largest share of backends ejected at once (at least one is
    /// allowed unless the share is 0).
    pub(crate) fn max_ejected_share(&self) -> f64 {
        self.max_ejected_share
    }

    /// The slow start of a backend that joins a running fleet.
    pub(crate) fn warm_up(&self) -> Duration {
        self.warm_up
    }

    /// The cost weight a joining backend starts its warm-up at.
    pub(crate) fn warm_up_min_weight(&self) -> f64 {
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
