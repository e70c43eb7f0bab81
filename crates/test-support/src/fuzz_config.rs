//! `StackConfig::from_toml`'s invariants on arbitrary text, shared by the
//! fuzz target (`fuzz/fuzz_targets/config_toml.rs`) and the proptest cases
//! of `tests/config/fuzz_inputs.rs`.
//!
//! Never a panic; text that is not TOML is a `Parse` error; a value out
//! of range is an `Invalid` error naming a key the file format has, in a
//! section the text wrote (a section left out keeps its defaults, which
//! are valid); parsing is deterministic; every message names what failed.

use tower_model_balance::config::{ConfigError, StackConfig};

/// Every key of the file format, by section: the keys an `Invalid` error
/// may name (`balance.model_owners."<model>"` aside).
pub const KEYS: [(&str, &[&str]); 6] = [
    (
        "balance",
        &[
            "owners",
            "min_owners",
            "load_factor",
            "owner_load",
            "panic_threshold",
            "latency_decay_ms",
            "model_owners",
            "vnodes_per_weight",
            "ring_seed",
            "breaker_scope",
            "max_pairs",
            "staging_max_share",
            "staging_cooldown_ms",
            "classification",
            "stop_point",
            "receipts",
        ],
    ),
    (
        "breaker",
        &[
            "window",
            "time_window_ms",
            "time_window_buckets",
            "minimum_calls",
            "failure_rate_threshold",
            "slow_call_rate_threshold",
            "slow_call_duration_ms",
            "consecutive_failures",
            "half_open_permits",
            "half_open_max_wait_ms",
            "open_duration_ms",
            "max_open_duration_ms",
            "jitter",
        ],
    ),
    (
        "health",
        &[
            "weights",
            "interval_ms",
            "error_alpha",
            "latency_alpha",
            "failure_penalty_ms",
            "relax_half_life_ms",
            "eject_below",
            "readmit_above",
            "queue_scale",
            "connections_full_below",
            "connections_zero_at",
            "outlier_factor",
            "outlier_ejection_ms",
            "max_ejected_share",
            "warm_up_ms",
            "warm_up_min_weight",
        ],
    ),
    (
        "probe",
        &["interval_ms", "timeout_ms", "jitter", "concurrency"],
    ),
    (
        "placement",
        &[
            "load_timeout_ms",
            "when_cold",
            "repository_interval_ms",
            "evict",
        ],
    ),
    (
        "hedge",
        &[
            "percentile",
            "median_factor",
            "window_ms",
            "min_samples",
            "floor_ms",
            "ceiling_ms",
            "max_models",
            "budget_ratio",
            "budget_window_ms",
            "max_attempts",
            "max_utilization",
        ],
    ),
];

/// The keys of `section`, if it is one.
pub fn keys_of(section: &str) -> Option<&'static [&'static str]> {
    KEYS.iter().find(|(s, _)| *s == section).map(|(_, k)| *k)
}

/// Text from bytes: UTF-8 as is, anything else replaced (TOML is UTF-8).
pub fn config_from_bytes(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

/// Parses `text` twice and checks the invariants above.
pub fn check_config(text: &str) {
    let result = StackConfig::from_toml(text);
    let again = StackConfig::from_toml(text);
    assert_eq!(format!("{result:?}"), format!("{again:?}"), "deterministic");
    let table = text.parse::<toml::Table>();
    let error = match result {
        Ok(config) => {
            assert!(table.is_ok(), "accepted text is TOML: {text:?}");
            // Every section built, the balancer's nested policies too, and
            // written back as TOML the loader accepts as the same config.
            let written = config.to_toml();
            let read = StackConfig::from_toml(&written)
                .unwrap_or_else(|e| panic!("{text:?} written as {written:?}: {e}"));
            assert_eq!(format!("{read:?}"), format!("{config:?}"), "{written}");
            return;
        }
        Err(error) => error,
    };
    let message = error.to_string();
    assert!(!message.is_empty());
    match &error {
        ConfigError::Parse(parse) => assert!(!parse.is_empty(), "{text:?}"),
        ConfigError::Invalid { key, expected } => {
            assert!(!expected.is_empty());
            assert!(message.contains(key.as_str()), "{message}");
            // An integer over i64::MAX is TOML a typed field reads (as a
            // u64), but a `toml::Table` cannot hold: the key is named, and
            // where it was written is not checked.
            let table = match table {
                Ok(table) => table,
                Err(e) if e.to_string().contains("too large") => return,
                Err(e) => panic!("a value out of range was read from {text:?}, not TOML: {e}"),
            };
            let (section, rest) = key.split_once('.').expect("section.key");
            let keys = keys_of(section).unwrap_or_else(|| panic!("no section in {key}"));
            let named = match rest.strip_prefix("model_owners.") {
                Some(model) => {
                    assert_eq!(section, "balance");
                    assert!(model.starts_with('"') && model.ends_with('"'), "{key}");
                    vec!["model_owners"]
                }
                None => rest.split(" / ").collect(),
            };
            for name in named {
                assert!(keys.contains(&name), "{key} names no key of the file");
            }
            // Defaults are valid: only a section the text wrote can fail.
            assert!(
                table.get(section).is_some_and(|s| s.is_table()),
                "{key} failed, but [{section}] was not written: {text:?}"
            );
        }
        _ => {}
    }
}
