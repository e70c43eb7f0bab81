//! The `[hedge]` table.

use serde::{Deserialize, Serialize};

use super::error::ConfigError;
use super::keys::{invalid, ms, to_ms};
use crate::hedge::HedgeConfig;

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HedgeFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) percentile: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) median_factor: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) window_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) min_samples: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) floor_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) ceiling_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) max_models: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) budget_ratio: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) budget_window_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) budget_min_per_sec: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) max_attempts: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) max_utilization: Option<f64>,
}

impl HedgeFile {
    /// Every setting of `h`, as its key.
    pub(super) fn of(h: &HedgeConfig) -> Self {
        HedgeFile {
            percentile: Some(h.percentile),
            median_factor: Some(h.median_factor),
            window_ms: to_ms(h.window),
            min_samples: Some(h.min_samples),
            floor_ms: to_ms(h.floor),
            ceiling_ms: to_ms(h.ceiling),
            max_models: Some(h.max_models),
            budget_ratio: Some(h.budget_ratio),
            budget_window_ms: to_ms(h.budget_window),
            budget_min_per_sec: Some(h.budget_min_per_sec),
            max_attempts: Some(h.max_attempts),
            max_utilization: Some(h.max_utilization),
        }
    }

    /// Through [`HedgeConfig::builder`]: its error, the key named.
    pub(super) fn build(self) -> Result<HedgeConfig, ConfigError> {
        let mut b = HedgeConfig::builder();
        if let Some(p) = self.percentile {
            b = b.percentile(p);
        }
        if let Some(f) = self.median_factor {
            b = b.median_factor(f);
        }
        if let Some(d) = self.window_ms {
            b = b.window(ms(d));
        }
        if let Some(n) = self.min_samples {
            b = b.min_samples(n);
        }
        if let Some(d) = self.floor_ms {
            b = b.floor(ms(d));
        }
        if let Some(d) = self.ceiling_ms {
            b = b.ceiling(ms(d));
        }
        if let Some(n) = self.max_models {
            b = b.max_models(n);
        }
        if let Some(r) = self.budget_ratio {
            b = b.budget_ratio(r);
        }
        if let Some(d) = self.budget_window_ms {
            b = b.budget_window(ms(d));
        }
        if let Some(n) = self.budget_min_per_sec {
            b = b.budget_min_per_sec(n);
        }
        if let Some(n) = self.max_attempts {
            b = b.max_attempts(n);
        }
        if let Some(u) = self.max_utilization {
            b = b.max_utilization(u);
        }
        b.build().map_err(|e| invalid("hedge", e))
    }
}
