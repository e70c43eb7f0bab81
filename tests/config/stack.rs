//! The stack's configuration from TOML: the example file is the defaults,
//! every value reaches its builder, and bad files are errors naming the key.

use std::time::Duration;

use tower_model_balance::balance::{BalanceConfig, BreakerScope, StagingConfig};
use tower_model_balance::breaker::BreakerConfig;
use tower_model_balance::classify::Classifier;
use tower_model_balance::config::{ConfigError, StackConfig};
use tower_model_balance::health::probe::ProbeConfig;
use tower_model_balance::health::HealthConfig;
use tower_model_balance::hedge::HedgeConfig;
use tower_model_balance::placement::{PlacementConfig, WhenCold};
use tower_model_balance::ring::RingConfig;
use tower_model_balance::route::ModelId;

const EXAMPLE: &str = include_str!("../../examples/stack.toml");

/// A value other than the default for keys of every section.
const NON_DEFAULTS: &str = r#"
        [balance]
        owners = 4
        min_owners = 2
        load_factor = 2.0
        owner_load = 0.75
        panic_threshold = 0.25
        vnodes_per_weight = 40
        ring_seed = 7
        breaker_scope = "backend_model"
        max_pairs = 500
        staging_max_share = 0.05
        staging_cooldown_ms = 2500
        classification = "grpc_status"
        stop_point = "end_of_body"
        receipts = true
        [balance.model_owners]
        "llama-3-70b" = 3
        "org/model:v2" = 1

        [breaker]
        time_window_ms = 30000
        time_window_buckets = 30
        consecutive_failures = 4
        open_duration_ms = 750
        jitter = false

        [health]
        weights = { latency = 0.6, capacity = 0.3, connection = 0.1 }
        eject_below = 0.1
        outlier_factor = 0
        warm_up_ms = 0

        [probe]
        interval_ms = 250
        timeout_ms = 100

        [placement]
        when_cold = "prefer_warm"
        load_timeout_ms = 60000
        evict = false

        [hedge]
        percentile = 0.99
        ceiling_ms = 750
        max_attempts = 1
        "#;

#[test]
fn the_example_file_is_the_defaults() {
    let config = StackConfig::from_toml(EXAMPLE).unwrap();
    assert_eq!(
        format!("{:?}", config.balance),
        format!("{:?}", BalanceConfig::default())
    );
    assert_eq!(config.probe, ProbeConfig::default());
    assert_eq!(config.placement, PlacementConfig::default());
    assert_eq!(config.hedge, HedgeConfig::default());
    let empty = StackConfig::from_toml("").unwrap();
    assert_eq!(
        format!("{:?}", empty.balance),
        format!("{:?}", config.balance)
    );
}

#[test]
fn every_value_reaches_its_builder() {
    let config = StackConfig::from_toml(NON_DEFAULTS).unwrap();
    let breaker = BreakerConfig::builder()
        .time_window(Duration::from_secs(30), 30)
        .consecutive_failures(4)
        .open_duration(Duration::from_millis(750))
        .jitter(false)
        .build()
        .unwrap();
    let health = HealthConfig::builder()
        .weights(0.6, 0.3, 0.1)
        .thresholds(0.1, 0.35)
        .outlier_factor(None)
        .warm_up(Duration::ZERO)
        .build()
        .unwrap();
    let model = |id: &str| ModelId::new(id).unwrap();
    let balance = BalanceConfig::builder()
        .owners(4)
        .min_owners(2)
        .load_factor(2.0)
        .owner_load(0.75)
        .panic_threshold(0.25)
        .ring(RingConfig::new(7, 40).unwrap())
        .breaker_scope(BreakerScope::BackendModel { max_pairs: 500 })
        .staging(StagingConfig::new(0.05, Duration::from_millis(2500)).unwrap())
        .classifier(Classifier::grpc())
        .stop_point(tower_model_balance::classify::StopPoint::EndOfBody)
        .receipts(true)
        .model_owners(model("llama-3-70b"), 3)
        .model_owners(model("org/model:v2"), 1)
        .breaker(breaker)
        .health(health)
        .build()
        .unwrap();
    assert_eq!(config.balance, balance);
    let probe = ProbeConfig::builder()
        .interval(Duration::from_millis(250))
        .timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    assert_eq!(config.probe, probe);
    let placement = PlacementConfig::builder()
        .when_cold(WhenCold::PreferWarm)
        .load_timeout(Duration::from_secs(60))
        .evict(false)
        .build()
        .unwrap();
    assert_eq!(config.placement, placement);
}

fn invalid(text: &str) -> (String, &'static str) {
    match StackConfig::from_toml(text).unwrap_err() {
        ConfigError::Invalid { key, expected } => (key, expected),
        other => panic!("{text}: {other}"),
    }
}

#[test]
fn a_value_out_of_range_names_its_key_and_range() {
    let cases = [
        (
            "[balance]\nload_factor = 0.5",
            "balance.load_factor",
            "1.0 ..= 100.0",
        ),
        ("[balance]\nowners = 1025", "balance.owners", ""),
        (
            "[balance]\nload_factor = 1.1\nowner_load = 1.2",
            "balance.owner_load",
            "above 0.0, up to load_factor",
        ),
        ("[balance]\nowner_load = 0.0", "balance.owner_load", ""),
        (
            "[balance]\nstaging_max_share = 0",
            "balance.staging_max_share",
            "",
        ),
        (
            "[balance]\nstaging_cooldown_ms = 7200000",
            "balance.staging_cooldown_ms",
            "",
        ),
        (
            "[balance]\nbreaker_scope = \"model\"",
            "balance.breaker_scope",
            "",
        ),
        ("[balance]\nmax_pairs = 10", "balance.max_pairs", ""),
        (
            "[balance]\nstop_point = \"ttft\"",
            "balance.stop_point",
            "\"first_frame\"",
        ),
        (
            "[balance]\nclassification = \"grpc\"",
            "balance.classification",
            "\"grpc_status\"",
        ),
        (
            "[balance.model_owners]\n\"\" = 2",
            "balance.model_owners.\"\"",
            "",
        ),
        ("[breaker]\nwindow = 0", "breaker.window", ""),
        (
            "[balance.model_owners]\n\"llama\" = 0",
            "balance.model_owners.\"llama\"",
            "1 ..= 1024",
        ),
        (
            "[balance]\nbreaker_scope = \"backend_model\"\nmax_pairs = 0",
            "balance.max_pairs",
            "1 ..= 1 000 000",
        ),
        (
            "[health]\noutlier_factor = 1.2",
            "health.outlier_factor",
            "1.5 ..= 1000, or off (None; 0 in a config file)",
        ),
        (
            "[breaker]\ntime_window_buckets = 5",
            "breaker.time_window_buckets",
            "",
        ),
        (
            "[breaker]\ntime_window_ms = 1000\ntime_window_buckets = 0",
            "breaker.time_window_buckets",
            "",
        ),
        (
            "[breaker]\nopen_duration_ms = 0",
            "breaker.open_duration_ms",
            "1 ms ..= 1 h",
        ),
        (
            "[breaker]\nfailure_rate_threshold = 1.5",
            "breaker.failure_rate_threshold",
            "",
        ),
        (
            "[health]\neject_below = 0.5",
            "health.eject_below / readmit_above",
            "",
        ),
        (
            "[health]\ninterval_ms = 5",
            "health.interval_ms",
            "10 ms ..= 60 s",
        ),
        (
            "[health]\nconnections_zero_at = 50",
            "health.connections_full_below / connections_zero_at",
            "",
        ),
        ("[probe]\ntimeout_ms = 0", "probe.timeout_ms", ""),
        (
            "[placement]\nload_timeout_ms = 0",
            "placement.load_timeout_ms",
            "1 ms ..= 1 h",
        ),
        (
            "[placement]\nwhen_cold = \"later\"",
            "placement.when_cold",
            "",
        ),
    ];
    for (text, key, expected) in cases {
        let (k, e) = invalid(text);
        assert_eq!(k, key, "{text}");
        assert!(e.contains(expected), "{text}: {e}");
    }
    let error = StackConfig::from_toml("[balance]\nload_factor = 0.5").unwrap_err();
    assert_eq!(
        error.to_string(),
        "invalid config: `balance.load_factor` must be 1.0 ..= 100.0"
    );
}

#[test]
fn unknown_keys_and_wrong_types_are_parse_errors_with_their_place() {
    for (text, needle) in [
        ("[balance]\nload_facter = 1.5", "load_facter"),
        ("[balanse]\nowners = 2", "balanse"),
        ("[balance]\nowners = \"two\"", "line 2"),
        ("[probe]\ninterval_ms = 1.5", "line 2"),
        ("not toml", "line 1"),
    ] {
        match StackConfig::from_toml(text).unwrap_err() {
            ConfigError::Parse(message) => assert!(message.contains(needle), "{text}: {message}"),
            other => panic!("{text}: {other}"),
        }
    }
}

#[test]
fn a_weight_left_out_keeps_its_default() {
    let config = StackConfig::from_toml("[health]\nweights = { latency = 1.0 }").unwrap();
    // Normalized to sum 1 from (1.0, 0.33, 0.17).
    let health = HealthConfig::builder()
        .weights(1.0, 0.33, 0.17)
        .build()
        .unwrap();
    let expected = BalanceConfig::builder().health(health).build().unwrap();
    assert_eq!(config.balance, expected);
}

/// Every section's settings, compared by their `Debug` text (the balancer's
/// config holds a residency header with no `PartialEq`).
fn same(a: &StackConfig, b: &StackConfig) -> bool {
    let all = |c: &StackConfig| {
        format!(
            "{:?}",
            (&c.balance, &c.breaker, &c.probe, &c.placement, &c.hedge)
        )
    };
    all(a) == all(b)
}

#[test]
fn a_config_written_as_toml_reads_back_the_same() {
    for text in [EXAMPLE, "", NON_DEFAULTS] {
        let config = StackConfig::from_toml(text).unwrap();
        let written = config.to_toml();
        let read = StackConfig::from_toml(&written).unwrap_or_else(|e| panic!("{e}\n{written}"));
        assert!(same(&config, &read), "{written}");
        assert_eq!(read.to_toml(), written, "writing is stable");
    }
    // Every key of the example file is written, and nothing else.
    let written = StackConfig::from_toml(NON_DEFAULTS).unwrap().to_toml();
    for key in [
        "owners",
        "time_window_buckets",
        "max_pairs",
        "outlier_factor = 0.0",
    ] {
        assert!(written.contains(key), "{key} in\n{written}");
    }
    let written = StackConfig::from_toml("").unwrap().to_toml();
    // Keys of `key = value` lines; an inline table's (`weights = { latency
    // = … }`) counted as the subtable's keys, as they are written.
    let keys = |text: &str| -> Vec<String> {
        text.lines()
            .map(|l| l.split('#').next().unwrap().trim())
            .filter(|l| !l.is_empty() && !l.starts_with('['))
            .flat_map(|l| match l.split_once("= {") {
                Some((_, inline)) => inline
                    .split(',')
                    .map(|kv| kv.split('=').next().unwrap().trim().to_string())
                    .collect(),
                None => vec![l.split('=').next().unwrap().trim().to_string()],
            })
            .collect()
    };
    let mut example = keys(EXAMPLE);
    let mut defaults = keys(&written);
    example.sort();
    defaults.sort();
    assert_eq!(example, defaults, "the example file lists the keys written");
}

#[test]
fn a_duration_set_in_code_is_written_in_whole_milliseconds_rounded_up() {
    let mut config = StackConfig::from_toml("").unwrap();
    config.placement = PlacementConfig::builder()
        .load_timeout(Duration::from_micros(1_500_200))
        .build()
        .unwrap();
    let written = config.to_toml();
    assert!(written.contains("load_timeout_ms = 1501"), "{written}");
}

#[test]
fn a_ring_seed_above_i64_max_is_written_as_a_string_toml_can_hold() {
    let ring = |seed| RingConfig::new(seed, 150).unwrap();
    for (text, seed) in [
        ("ring_seed = 9223372036854775807", i64::MAX as u64),
        ("ring_seed = \"0xffffffffffffffff\"", u64::MAX),
        ("ring_seed = \"18446744073709551615\"", u64::MAX),
        ("ring_seed = \"0x8000000000000000\"", 1 << 63),
        ("ring_seed = \"42\"", 42),
    ] {
        let config = StackConfig::from_toml(&format!("[balance]\n{text}"))
            .unwrap_or_else(|e| panic!("{text}: {e}"));
        let balance = BalanceConfig::builder().ring(ring(seed)).build().unwrap();
        assert_eq!(config.balance, balance, "{text}");
        let written = config.to_toml();
        let expected = match i64::try_from(seed) {
            Ok(_) => format!("ring_seed = {seed}\n"),
            Err(_) => format!("ring_seed = \"{seed:#x}\"\n"),
        };
        assert!(written.contains(&expected), "{expected} in\n{written}");
        let read = StackConfig::from_toml(&written).unwrap();
        assert_eq!(read.balance, balance, "{written}");
    }
    for text in [
        "ring_seed = -1",
        "ring_seed = \"0x1ffffffffffffffff\"",
        "ring_seed = \"seven\"",
        "ring_seed = \"+5\"",
        "ring_seed = \"0x+5\"",
        "ring_seed = \"\"",
        "ring_seed = 1.5",
    ] {
        match StackConfig::from_toml(&format!("[balance]\n{text}")).unwrap_err() {
            ConfigError::Parse(message) => {
                assert!(message.contains("line 2"), "{text}: {message}");
                assert!(message.contains("0x hex"), "{text}: {message}");
            }
            other => panic!("{text}: {other}"),
        }
    }
}

mod round_trip {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Any valid file, read, written and read again, gives the same
        /// settings.
        #[test]
        fn any_valid_file(
            owners in 1usize..=16,
            min_owners in 1usize..=16,
            load_factor in 1.0f64..=100.0,
            panic_threshold in 0.0f64..=1.0,
            seed in any::<u64>(),
            window in prop_oneof![
                (1usize..=10_000).prop_map(|n| format!("window = {n}")),
                (100u64..=3_600_000, 1u32..=100)
                    .prop_map(|(ms, b)| format!("time_window_ms = {ms}\ntime_window_buckets = {b}")),
            ],
            failure_rate in 0.0f64..=1.0,
            open_ms in 1u64..=60_000,
            jitter in any::<bool>(),
            eject_below in 0.0f64..=0.5,
            probe_ms in 10u64..=60_000,
            prefer_warm in any::<bool>(),
        ) {
            let text = format!(
                "[balance]\nowners = {owners}\nmin_owners = {min_owners}\nload_factor = {load_factor}\n\
                 panic_threshold = {panic_threshold}\nring_seed = {seed}\n\
                 [breaker]\n{window}\nfailure_rate_threshold = {failure_rate}\n\
                 open_duration_ms = {open_ms}\njitter = {jitter}\n\
                 [health]\neject_below = {eject_below}\n\
                 [probe]\ninterval_ms = {probe_ms}\n\
                 [placement]\nwhen_cold = \"{}\"\n",
                if prefer_warm { "prefer_warm" } else { "wait" }
            );
            let Ok(config) = StackConfig::from_toml(&text) else {
                // Out of a range the strategies cannot see (min_owners >
                // owners, open_duration_ms over its maximum...).
                return Ok(());
            };
            let written = config.to_toml();
            let read = StackConfig::from_toml(&written);
            prop_assert!(read.is_ok(), "{:?}\n{}", read.err(), written);
            prop_assert!(same(&config, &read.unwrap()), "{}", written);
        }
    }
}
