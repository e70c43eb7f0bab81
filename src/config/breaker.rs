//! The `[breaker]` table.

use serde::{Deserialize, Serialize};

use super::error::ConfigError;
use super::keys::{invalid, ms};
use crate::breaker::BreakerConfig;

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BreakerFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) window: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) time_window_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) time_window_buckets: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) minimum_calls: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) failure_rate_threshold: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) slow_call_rate_threshold: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) slow_call_duration_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) consecutive_failures: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) half_open_permits: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) half_open_max_wait_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) open_duration_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) max_open_duration_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) jitter: Option<bool>,
}

impl BreakerFile {
    pub(super) fn build(self) -> Result<BreakerConfig, ConfigError> {
        let mut b = BreakerConfig::builder();
        if let (Some(_), Some(_)) = (self.window, self.time_window_ms) {
            return Err(ConfigError::Invalid {
                key: "breaker.window".into(),
                expected: "unset when time_window_ms is set",
            });
        }
        if let Some(calls) = self.window {
            b = b.window(calls);
        }
        match (self.time_window_ms, self.time_window_buckets) {
            (Some(window), buckets) => b = b.time_window(ms(window), buckets.unwrap_or(10)),
            (None, Some(_)) => {
                return Err(ConfigError::Invalid {
                    key: "breaker.time_window_buckets".into(),
                    expected: "set only with time_window_ms",
                })
            }
            (None, None) => {}
        }
        if let Some(calls) = self.minimum_calls {
            b = b.minimum_calls(calls);
        }
        if let Some(rate) = self.failure_rate_threshold {
            b = b.failure_rate_threshold(rate);
        }
        if let Some(rate) = self.slow_call_rate_threshold {
            b = b.slow_call_rate_threshold(rate);
        }
        if let Some(d) = self.slow_call_duration_ms {
            b = b.slow_call_duration(ms(d));
        }
        if let Some(n) = self.consecutive_failures {
            b = b.consecutive_failures(n);
        }
        if let Some(n) = self.half_open_permits {
            b = b.half_open_permits(n);
        }
        if let Some(d) = self.half_open_max_wait_ms {
            b = b.half_open_max_wait(ms(d));
        }
        if let Some(d) = self.open_duration_ms {
            b = b.open_duration(ms(d));
        }
        if let Some(d) = self.max_open_duration_ms {
            b = b.max_open_duration(ms(d));
        }
        if let Some(on) = self.jitter {
            b = b.jitter(on);
        }
        b.build().map_err(|e| invalid("breaker", e))
    }
}
