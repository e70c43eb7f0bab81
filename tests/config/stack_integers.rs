//! An integer the key's type cannot hold — negative, or too large for a
//! `u32` key — is a value out of range like any other: the key and what it
//! must be, in the builder's words, never the parser's `expected u64`.

use tower_model_balance::config::{ConfigError, StackConfig};

fn invalid(text: &str) -> (String, &'static str) {
    match StackConfig::from_toml(text).unwrap_err() {
        ConfigError::Invalid { key, expected } => (key, expected),
        other => panic!("{text}: {other}"),
    }
}

#[test]
fn a_negative_integer_names_its_key_and_range() {
    let cases = [
        ("[balance]\nowners = -1", "balance.owners", "1 ..= 1024"),
        (
            "[balance]\nvnodes_per_weight = -3",
            "balance.vnodes_per_weight",
            "1 ..= 10000",
        ),
        (
            "[balance.model_owners]\n\"llama\" = -2",
            "balance.model_owners.\"llama\"",
            "1 ..= 1024",
        ),
        ("[breaker]\nwindow = -1", "breaker.window", ""),
        (
            "[breaker]\nopen_duration_ms = -5",
            "breaker.open_duration_ms",
            "1 ms ..= 1 h",
        ),
        (
            "[breaker]\nconsecutive_failures = -1",
            "breaker.consecutive_failures",
            "",
        ),
        ("[health]\nwarm_up_ms = -1", "health.warm_up_ms", ""),
        (
            "[health]\nconnections_zero_at = -1",
            "health.connections_full_below / connections_zero_at",
            "",
        ),
        ("[probe]\nconcurrency = -8", "probe.concurrency", ""),
        (
            "[placement]\nload_timeout_ms = -1",
            "placement.load_timeout_ms",
            "1 ms ..= 1 h",
        ),
        ("[hedge]\nmax_models = -1", "hedge.max_models", "1 ..= 4096"),
        ("[hedge]\nmin_samples = -1", "hedge.min_samples", ""),
        ("[admission]\nlimit = -1", "admission.limit", ""),
    ];
    for (text, key, expected) in cases {
        let (k, e) = invalid(text);
        assert_eq!(k, key, "{text}");
        assert!(e.contains(expected), "{text}: {e}");
        assert!(!e.contains("u64") && !e.contains("usize"), "{text}: {e}");
    }
    let error = StackConfig::from_toml("[balance]\nowners = -1").unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid config: `balance.owners` must be 1 ..= 1024"
    );
}

#[test]
fn the_words_are_the_builders_own() {
    // The same words as for 0, the nearest value the type holds.
    for (negative, zero) in [
        ("[balance]\nmin_owners = -1", "[balance]\nmin_owners = 0"),
        (
            "[breaker]\nhalf_open_permits = -1",
            "[breaker]\nhalf_open_permits = 0",
        ),
        ("[hedge]\nceiling_ms = -1", "[hedge]\nceiling_ms = 0"),
    ] {
        assert_eq!(invalid(negative), invalid(zero), "{negative}");
    }
    // Too large for a `u32` key: the builder's upper end.
    let (key, expected) = invalid("[balance]\nvnodes_per_weight = 5000000000");
    assert_eq!(
        (key.as_str(), expected),
        ("balance.vnodes_per_weight", "1 ..= 10000")
    );
}

#[test]
fn other_faults_keep_the_parsers_message() {
    for (text, needle) in [
        // A float key takes a negative integer: its builder's range.
        ("[balance]\nowners = -1\nload_facter = 2", "load_facter"),
        ("[balance]\nowners = -1.5", "line 2"),
        ("[balance]\nring_seed = -1", "0x hex"),
    ] {
        match StackConfig::from_toml(text).unwrap_err() {
            ConfigError::Parse(message) => assert!(message.contains(needle), "{text}: {message}"),
            other => panic!("{text}: {other}"),
        }
    }
    let (key, _) = invalid("[balance]\nload_factor = -1");
    assert_eq!(key, "balance.load_factor");
    // A `u64` key takes an integer above `u32::MAX`: its builder judges it.
    let (key, expected) = invalid("[hedge]\nmin_samples = 5000000000");
    assert_eq!(
        (key.as_str(), expected),
        ("hedge.min_samples", "0 ..= 1000000")
    );
    let text = "[hedge]\nmin_samples = 5000000000\n[balance]\nvnodes_per_weight = -1";
    assert_eq!(invalid(text).0, "balance.vnodes_per_weight");
    // Another key's fault that the builder sees first is said.
    let text = "[balance]\nowners = 0\nmin_owners = -1";
    assert_eq!(invalid(text).0, "balance.owners");
}
