//! The `[health]` and `[probe]` tables.

use serde::{Deserialize, Serialize};

use super::error::ConfigError;
use super::keys::{invalid, ms};
use crate::health::probe::ProbeConfig;
use crate::health::HealthConfig;

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Weights {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) latency: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) capacity: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) connection: Option<f64>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HealthFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) weights: Option<Weights>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) interval_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) error_alpha: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) latency_alpha: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) failure_penalty_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) relax_half_life_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) eject_below: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) readmit_above: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) queue_scale: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) connections_full_below: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) connections_zero_at: Option<u32>,
    /// 0 turns latency-outlier ejection off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) outlier_factor: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) outlier_ejection_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) max_ejected_share: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) warm_up_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) warm_up_min_weight: Option<f64>,
}

impl HealthFile {
    pub(super) fn build(self) -> Result<HealthConfig, ConfigError> {
        let defaults = HealthConfig::default();
        let mut b = HealthConfig::builder();
        if let Some(w) = self.weights {
            // A weight left out keeps its default.
            let [latency, capacity, connection] = defaults.weights();
            b = b.weights(
                w.latency.unwrap_or(latency),
                w.capacity.unwrap_or(capacity),
                w.connection.unwrap_or(connection),
            );
        }
        if let Some(d) = self.interval_ms {
            b = b.interval(ms(d));
        }
        if let Some(a) = self.error_alpha {
            b = b.error_alpha(a);
        }
        if let Some(a) = self.latency_alpha {
            b = b.latency_alpha(a);
        }
        if let Some(d) = self.failure_penalty_ms {
            b = b.failure_penalty(ms(d));
        }
        if let Some(d) = self.relax_half_life_ms {
            b = b.relax_half_life(ms(d));
        }
        if self.eject_below.is_some() || self.readmit_above.is_some() {
            b = b.thresholds(
                self.eject_below.unwrap_or(defaults.eject_below()),
                self.readmit_above.unwrap_or(defaults.readmit_above()),
            );
        }
        if let Some(q) = self.queue_scale {
            b = b.queue_scale(q);
        }
        if self.connections_full_below.is_some() || self.connections_zero_at.is_some() {
            let (full, zero) = defaults.connections();
            b = b.connections(
                self.connections_full_below.unwrap_or(full),
                self.connections_zero_at.unwrap_or(zero),
            );
        }
        if let Some(f) = self.outlier_factor {
            b = b.outlier_factor((f != 0.0).then_some(f));
        }
        if let Some(d) = self.outlier_ejection_ms {
            b = b.outlier_ejection(ms(d));
        }
        if let Some(s) = self.max_ejected_share {
            b = b.max_ejected_share(s);
        }
        if let Some(d) = self.warm_up_ms {
            b = b.warm_up(ms(d));
        }
        if let Some(w) = self.warm_up_min_weight {
            b = b.warm_up_min_weight(w);
        }
        b.build().map_err(|e| invalid("health", e))
    }
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ProbeFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) interval_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) timeout_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) jitter: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) concurrency: Option<usize>,
}

impl ProbeFile {
    pub(super) fn build(self) -> Result<ProbeConfig, ConfigError> {
        let mut b = ProbeConfig::builder();
        if let Some(d) = self.interval_ms {
            b = b.interval(ms(d));
        }
        if let Some(d) = self.timeout_ms {
            b = b.timeout(ms(d));
        }
        if let Some(j) = self.jitter {
            b = b.jitter(j);
        }
        if let Some(n) = self.concurrency {
            b = b.concurrency(n);
        }
        b.build().map_err(|e| invalid("probe", e))
    }
}
