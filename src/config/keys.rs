//! How the file's keys map to the builders' fields: a builder's error
//! named by its key, and durations as whole milliseconds.

use std::time::Duration;

use super::error::ConfigError;
use super::file::File;
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

// === integers out of their key's type ===

/// The error for a file whose fault is an integer its key's type cannot
/// hold — a negative one (every integer key is unsigned), or one above
/// `u32::MAX` for a `u32` key — named by its key with what the key must
/// be in its builder's words, as any value out of range is, rather than
/// the parser's `expected u64`. `None` when the file has another fault:
/// the parser's message stands.
///
/// The builder's words come from building the file with the integer at
/// the nearest end of the type (0 for a negative one) and then at the
/// largest values TOML holds, until the builder names the key. A key whose
/// builder takes them all (none today) is said to be `0 or more`.
pub(super) fn out_of_type(text: &str) -> Option<ConfigError> {
    let table: toml::Table = toml::from_str(text).ok()?;
    let mut candidates = Vec::new();
    integers(&table, &mut Vec::new(), &mut candidates);
    // `balance.ring_seed` reads its own two spellings and names its range
    // itself (a string above 2^63 − 1).
    candidates.retain(|(path, n)| {
        (*n < 0 || *n > i64::from(u32::MAX)) && path.join(".") != "balance.ring_seed"
    });
    let mut base = table.clone();
    for (path, _) in &candidates {
        set(&mut base, path, 0);
    }
    // Another fault than these integers: the parser's message.
    read(&base).ok()?;
    // Each integer back as written where its key takes it (a float key
    // takes an integer, a `u64` key one above `u32::MAX`): the first one
    // refused is the fault.
    let mut fault = None;
    for (path, n) in candidates {
        let mut restored = base.clone();
        set(&mut restored, &path, n);
        match read(&restored) {
            Ok(_) => base = restored,
            Err(_) => fault = fault.or(Some((path, n))),
        }
    }
    let (path, n) = fault?;
    let probes: &[i64] = match n < 0 {
        true => &[0, u32::MAX as i64, i64::MAX],
        false => &[u32::MAX as i64, i64::MAX],
    };
    let (section, leaf) = (&path[0], &path[path.len() - 1]);
    let mut other = None;
    for &probe in probes {
        let mut probed = base.clone();
        set(&mut probed, &path, probe);
        let Ok(file) = read(&probed) else { continue };
        match file.build() {
            Err(ConfigError::Invalid { key, expected })
                if key.starts_with(&format!("{section}.")) && key.contains(leaf.as_str()) =>
            {
                return Some(ConfigError::Invalid { key, expected });
            }
            // Another key's fault, the builder's first: said if this
            // key's words are not found.
            Err(error) => other = other.or(Some(error)),
            Ok(_) => {}
        }
    }
    Some(other.unwrap_or(ConfigError::Invalid {
        key: path.join("."),
        expected: "0 or more",
    }))
}

/// Every integer in `table`, with its path of keys.
fn integers(table: &toml::Table, path: &mut Vec<String>, out: &mut Vec<(Vec<String>, i64)>) {
    for (key, value) in table {
        path.push(key.clone());
        match value {
            toml::Value::Integer(n) => out.push((path.clone(), *n)),
            toml::Value::Table(inner) => integers(inner, path, out),
            _ => {}
        }
        path.pop();
    }
}

/// Sets the integer at `path` in `table` to `n`.
fn set(table: &mut toml::Table, path: &[String], n: i64) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut table = table;
    for key in parents {
        match table.get_mut(key) {
            Some(toml::Value::Table(inner)) => table = inner,
            _ => return,
        }
    }
    table.insert(last.clone(), toml::Value::Integer(n));
}

/// `table` as the file's shape.
fn read(table: &toml::Table) -> Result<File, toml::de::Error> {
    toml::Value::Table(table.clone()).try_into()
}
