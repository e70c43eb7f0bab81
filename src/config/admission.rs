//! The `[admission]` table: per-backend limits and shedding; absent, no
//! admission.

use serde::{Deserialize, Serialize};

use super::error::ConfigError;
use super::keys::{ms, to_ms};
use crate::balance::config::admission::{LimitKind, URGENCIES};
use crate::balance::{AdmissionConfig, Limit};
use crate::error::InvalidConfig;

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AdmissionFile {
    /// A fixed limit; or `limit_min` and `limit_max` for an adaptive one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) limit: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) limit_min: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) limit_max: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) backoff: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) latency_threshold_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) critical_headroom: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) queue_capacity: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) max_wait_normal_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) max_wait_high_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) max_wait_critical_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) retry_after_ms: Option<u64>,
}

impl AdmissionFile {
    /// Every setting of `a`, as its key.
    pub(super) fn of(a: &AdmissionConfig) -> Self {
        let (limit, limit_min, limit_max, backoff, latency) = match a.limit.kind {
            LimitKind::Fixed(n) => (Some(n), None, None, None, None),
            LimitKind::Aimd(x) => (
                None,
                Some(x.min),
                Some(x.max),
                Some(x.backoff),
                to_ms(x.latency_threshold),
            ),
        };
        let [normal, high, critical] = a.max_wait;
        AdmissionFile {
            limit,
            limit_min,
            limit_max,
            backoff,
            latency_threshold_ms: latency,
            critical_headroom: Some(a.critical_headroom),
            queue_capacity: Some(a.queue_capacity),
            max_wait_normal_ms: to_ms(normal),
            max_wait_high_ms: to_ms(high),
            max_wait_critical_ms: to_ms(critical),
            retry_after_ms: to_ms(a.retry_after),
        }
    }

    /// Through [`AdmissionConfig::builder`]: its error, the key named.
    pub(super) fn build(self) -> Result<AdmissionConfig, ConfigError> {
        let limit = match (self.limit, self.limit_min, self.limit_max) {
            (Some(n), None, None) => Limit::fixed(n),
            (None, Some(min), Some(max)) => {
                let mut l = Limit::aimd(min, max);
                if let Some(r) = self.backoff {
                    l = l.with_backoff(r);
                }
                if let Some(d) = self.latency_threshold_ms {
                    l = l.with_latency_threshold(ms(d));
                }
                l
            }
            (None, None, None) => {
                return Err(ConfigError::Invalid {
                    key: "admission.limit".into(),
                    expected:
                        "set: either `limit` (fixed) or both `limit_min` and `limit_max` (adaptive)",
                })
            }
            (Some(_), _, _) => {
                return Err(ConfigError::Invalid {
                    key: "admission.limit".into(),
                    expected: "given alone: a fixed `limit` takes no `limit_min` or `limit_max` (those two are the adaptive limit's)",
                })
            }
            _ => {
                return Err(ConfigError::Invalid {
                    key: "admission.limit_min / admission.limit_max".into(),
                    expected: "given together: the adaptive limit needs both",
                })
            }
        };
        if matches!(limit.kind, LimitKind::Fixed(_))
            && (self.backoff.is_some() || self.latency_threshold_ms.is_some())
        {
            return Err(ConfigError::Invalid {
                key: "admission.backoff / admission.latency_threshold_ms".into(),
                expected: "set only with an adaptive limit (`limit_min` and `limit_max`)",
            });
        }
        let mut b = AdmissionConfig::builder(limit);
        if let Some(share) = self.critical_headroom {
            b = b.critical_headroom(share);
        }
        if let Some(n) = self.queue_capacity {
            b = b.queue_capacity(n);
        }
        let waits = [
            self.max_wait_normal_ms,
            self.max_wait_high_ms,
            self.max_wait_critical_ms,
        ];
        for (urgency, wait) in URGENCIES.into_iter().zip(waits) {
            if let Some(d) = wait {
                b = b.max_wait(urgency, ms(d));
            }
        }
        if let Some(d) = self.retry_after_ms {
            b = b.retry_after(ms(d));
        }
        b.build().map_err(key)
    }
}

/// The builder's field as the file's key.
fn key(e: InvalidConfig) -> ConfigError {
    let key = match e.field {
        "admission.limit.backoff" => "admission.backoff",
        "admission.limit.latency_threshold" => "admission.latency_threshold_ms",
        "admission.max_wait" => {
            "admission.max_wait_normal_ms / max_wait_high_ms / max_wait_critical_ms"
        }
        "admission.retry_after" => "admission.retry_after_ms",
        field => field,
    };
    ConfigError::Invalid {
        key: key.to_owned(),
        expected: e.expected,
    }
}
