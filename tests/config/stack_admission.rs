//! The `[admission]` table: into `AdmissionConfigBuilder`, its errors
//! naming the file's keys, and back out through `to_toml`.

use std::time::Duration;

use tower_model_balance::balance::{AdmissionConfig, BalanceConfig, Limit};
use tower_model_balance::config::{ConfigError, StackConfig};
use tower_model_balance::route::Urgency;

fn invalid_key(text: &str) -> String {
    match StackConfig::from_toml(text).unwrap_err() {
        ConfigError::Invalid { key, .. } => key,
        other => panic!("{other}"),
    }
}

#[test]
fn a_fixed_limit_and_its_waits() {
    let config = StackConfig::from_toml(
        "[admission]\nlimit = 64\nmax_wait_normal_ms = 20\nretry_after_ms = 2500\n",
    )
    .unwrap();
    let admission = AdmissionConfig::builder(Limit::fixed(64))
        .max_wait(Urgency::Normal, Duration::from_millis(20))
        .retry_after(Duration::from_millis(2_500))
        .build()
        .unwrap();
    let expected = BalanceConfig::builder()
        .admission(admission)
        .build()
        .unwrap();
    assert_eq!(config.balance, expected);
    let back = StackConfig::from_toml(&config.to_toml()).unwrap();
    assert_eq!(back.balance, expected, "round trip");
}

#[test]
fn an_adaptive_limit() {
    let text =
        "[admission]\nlimit_min = 4\nlimit_max = 256\nbackoff = 0.8\nlatency_threshold_ms = 2000\n";
    let config = StackConfig::from_toml(text).unwrap();
    let limit = Limit::aimd(4, 256)
        .with_backoff(0.8)
        .with_latency_threshold(Duration::from_secs(2));
    let admission = AdmissionConfig::builder(limit).build().unwrap();
    let expected = BalanceConfig::builder()
        .admission(admission)
        .build()
        .unwrap();
    assert_eq!(config.balance, expected);
    assert_eq!(
        StackConfig::from_toml(&config.to_toml()).unwrap().balance,
        expected
    );
}

#[test]
fn no_table_no_admission() {
    let config = StackConfig::from_toml("").unwrap();
    assert_eq!(config.balance, BalanceConfig::default());
    assert!(!config.to_toml().contains("[admission]"));
}

#[test]
fn each_bad_value_names_its_key() {
    assert_eq!(invalid_key("[admission]\n"), "admission.limit");
    assert_eq!(
        invalid_key("[admission]\nlimit = 4\nlimit_min = 1\nlimit_max = 8\n"),
        "admission.limit"
    );
    assert_eq!(
        invalid_key("[admission]\nlimit_min = 4\n"),
        "admission.limit_min / admission.limit_max"
    );
    // A fixed limit with an adaptive bound says so, not that `limit` is unset.
    let mixed = StackConfig::from_toml("[admission]\nlimit = 4\nlimit_min = 2\n").unwrap_err();
    assert!(mixed.to_string().contains("given alone"), "{mixed}");
    assert_eq!(invalid_key("[admission]\nlimit = 0\n"), "admission.limit");
    assert_eq!(
        invalid_key("[admission]\nlimit = 4\nbackoff = 0.9\n"),
        "admission.backoff / admission.latency_threshold_ms"
    );
    assert_eq!(
        invalid_key("[admission]\nlimit_min = 1\nlimit_max = 4\nbackoff = 2.0\n"),
        "admission.backoff"
    );
    assert_eq!(
        invalid_key("[admission]\nlimit_min = 1\nlimit_max = 4\nlatency_threshold_ms = 0\n"),
        "admission.latency_threshold_ms"
    );
    assert_eq!(
        invalid_key("[admission]\nlimit = 4\ncritical_headroom = -1.0\n"),
        "admission.critical_headroom"
    );
    assert_eq!(
        invalid_key("[admission]\nlimit = 4\nqueue_capacity = 2000000\n"),
        "admission.queue_capacity"
    );
    assert!(
        invalid_key("[admission]\nlimit = 4\nmax_wait_high_ms = 9000000\n")
            .starts_with("admission.max_wait")
    );
    assert_eq!(
        invalid_key("[admission]\nlimit = 4\nretry_after_ms = 9000000\n"),
        "admission.retry_after_ms"
    );
    assert!(matches!(
        StackConfig::from_toml("[admission]\nlimit = 4\nlimits = 5\n"),
        Err(ConfigError::Parse(_))
    ));
}
