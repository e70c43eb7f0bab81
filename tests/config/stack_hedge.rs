//! The `[hedge]` table of the stack's TOML file: through
//! `HedgeConfig::builder`, written back by `to_toml`, and its errors in the
//! builder's own words.

use std::time::Duration;

use tower_model_balance::config::{ConfigError, StackConfig};
use tower_model_balance::hedge::HedgeConfig;

const ALL_KEYS: &str = r#"
    [hedge]
    percentile = 0.99
    median_factor = 3.5
    window_ms = 20000
    min_samples = 5
    floor_ms = 10
    ceiling_ms = 750
    max_models = 128
    budget_ratio = 0.02
    budget_window_ms = 30000
    budget_min_per_sec = 3
    max_attempts = 1
    max_utilization = 0.9
"#;

#[test]
fn every_hedge_key_reaches_the_builder() {
    let config = StackConfig::from_toml(ALL_KEYS).unwrap();
    let ms = Duration::from_millis;
    let hedge = HedgeConfig::builder()
        .percentile(0.99)
        .median_factor(3.5)
        .window(ms(20_000))
        .min_samples(5)
        .floor(ms(10))
        .ceiling(ms(750))
        .max_models(128)
        .budget_ratio(0.02)
        .budget_window(ms(30_000))
        .budget_min_per_sec(3)
        .max_attempts(1)
        .max_utilization(0.9)
        .build()
        .unwrap();
    assert_eq!(config.hedge, hedge);
    let empty = StackConfig::from_toml("").unwrap();
    assert_eq!(
        empty.hedge,
        HedgeConfig::default(),
        "left out: the defaults"
    );
}

#[test]
fn the_hedge_table_round_trips_through_to_toml() {
    for text in ["", ALL_KEYS] {
        let config = StackConfig::from_toml(text).unwrap();
        let written = config.to_toml();
        assert!(written.contains("[hedge]"), "{written}");
        let read = StackConfig::from_toml(&written).unwrap_or_else(|e| panic!("{e}\n{written}"));
        assert_eq!(read.hedge, config.hedge, "{written}");
        assert_eq!(read.to_toml(), written, "writing is stable");
    }
    // Set in code, written, read back.
    let mut config = StackConfig::from_toml("").unwrap();
    config.hedge = HedgeConfig::builder()
        .ceiling(Duration::from_millis(1500))
        .budget_ratio(0.1)
        .build()
        .unwrap();
    let written = config.to_toml();
    assert!(written.contains("ceiling_ms = 1500"), "{written}");
    assert_eq!(
        StackConfig::from_toml(&written).unwrap().hedge,
        config.hedge
    );
}

fn invalid(text: &str) -> (String, &'static str) {
    match StackConfig::from_toml(text).unwrap_err() {
        ConfigError::Invalid { key, expected } => (key, expected),
        other => panic!("{text}: {other}"),
    }
}

#[test]
fn an_invalid_hedge_value_names_its_key() {
    let cases = [
        ("[hedge]\npercentile = 0.3", "hedge.percentile"),
        ("[hedge]\nwindow_ms = 99", "hedge.window_ms"),
        ("[hedge]\nceiling_ms = 0", "hedge.ceiling_ms"),
        ("[hedge]\nfloor_ms = 10\nceiling_ms = 5", "hedge.floor_ms"),
        ("[hedge]\nbudget_window_ms = 999", "hedge.budget_window_ms"),
        ("[hedge]\nmax_attempts = 3", "hedge.max_attempts"),
        ("[hedge]\nmax_models = 0", "hedge.max_models"),
        ("[hedge]\nmax_utilization = 0.0", "hedge.max_utilization"),
    ];
    for (text, key) in cases {
        assert_eq!(invalid(text).0, key, "{text}");
    }
    let parse = StackConfig::from_toml("[hedge]\nmax_attempts = \"two\"").unwrap_err();
    assert!(matches!(parse, ConfigError::Parse(_)), "{parse}");
    let unknown = StackConfig::from_toml("[hedge]\ndelay_ms = 5").unwrap_err();
    assert!(matches!(unknown, ConfigError::Parse(_)), "{unknown}");
}

/// The file's error is the builder's, with the key as context: the same
/// words, never a second validation of its own.
#[test]
fn the_file_and_the_builder_say_the_same_words() {
    let builder = HedgeConfig::builder()
        .budget_ratio(1.5)
        .build()
        .unwrap_err();
    let (key, expected) = invalid("[hedge]\nbudget_ratio = 1.5");
    assert_eq!(key, "hedge.budget_ratio");
    assert_eq!(expected, builder.expected);
    let file = StackConfig::from_toml("[hedge]\nbudget_ratio = 1.5").unwrap_err();
    assert_eq!(
        file.to_string(),
        builder
            .to_string()
            .replace("`budget_ratio`", "`hedge.budget_ratio`")
    );
    // The two fields whose words the loader used to rewrite.
    let builder = tower_model_balance::health::HealthConfig::builder()
        .outlier_factor(Some(1.2))
        .build()
        .unwrap_err();
    assert_eq!(
        invalid("[health]\noutlier_factor = 1.2").1,
        builder.expected
    );
    let builder = tower_model_balance::balance::BalanceConfig::builder()
        .breaker_scope(tower_model_balance::balance::BreakerScope::BackendModel { max_pairs: 0 })
        .build()
        .unwrap_err();
    let text = "[balance]\nbreaker_scope = \"backend_model\"\nmax_pairs = 0";
    assert_eq!(invalid(text).1, builder.expected);
    let builder = tower_model_balance::balance::BalanceConfig::builder()
        .model_owners(
            tower_model_balance::route::ModelId::new("llama").unwrap(),
            0,
        )
        .build()
        .unwrap_err();
    assert_eq!(
        invalid("[balance.model_owners]\n\"llama\" = 0").1,
        builder.expected
    );
}
