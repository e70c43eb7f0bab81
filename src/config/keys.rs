//! How the file's keys map to the builders' fields: a builder's error
//! named by its key, and durations as whole milliseconds.

use std::time::Duration;

use super::error::ConfigError;
use crate::error::InvalidConfig;

/// `error` from section `section`'s builder, its field named as the
/// file's key; what it must be is the builder's words, unchanged.
pub(super) fn invalid(section: &str, error: InvalidConfig) -> ConfigError {
    let key = match error.field {
        "breaker_scope" => "max_pairs".to_string(),
        field if section == "hedge" && HEDGE_DURATIONS.contains(&field) => {
            format!("{field}_ms")
        }
        "time_window" if error.expected.contains("buckets") => "time_window_buckets".to_string(),
        // Builder methods that take several keys at once.
        "thresholds" => "eject_below / readmit_above".to_string(),
        "connections" => "connections_full_below / connections_zero_at".to_string(),
        "cooldown" => "staging_cooldown_ms".to_string(),
        "max_share" => "staging_max_share".to_string(),
        field if DURATIONS.contains(&field) => format!("{field}_ms"),
        field => field.to_string(),
    };
    ConfigError::Invalid {
        key: format!("{section}.{key}"),
        expected: error.expected,
    }
}

/// Builder fields that are durations: `_ms` in the file.
const DURATIONS: [&str; 14] = [
    "interval",
    "latency_decay",
    "timeout",
    "failure_penalty",
    "relax_half_life",
    "outlier_ejection",
    "warm_up",
    "slow_call_duration",
    "half_open_max_wait",
    "open_duration",
    "max_open_duration",
    "load_timeout",
    "repository_interval",
    "time_window",
];

pub(super) fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// `d` in whole milliseconds, rounded up.
pub(super) fn to_ms(d: Duration) -> Option<u64> {
    let ms = d.as_nanos().div_ceil(1_000_000);
    Some(u64::try_from(ms).unwrap_or(u64::MAX))
}

/// The hedge builder's fields that are durations: `_ms` in the file (the
/// breaker's `window` is a count of calls, so these are the hedge's own).
pub(super) const HEDGE_DURATIONS: [&str; 4] = ["window", "floor", "ceiling", "budget_window"];
