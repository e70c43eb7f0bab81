//! One TOML file configures each layer alone and the whole stack: a file
//! with only `[breaker]` builds a standalone `CircuitBreakerLayer`, one with
//! only `[hedge]` a standalone `HedgeLayer`, each with the file's
//! settings in force, and the example file loads them all.

use std::time::Duration;

use tower::{service_fn, Layer, ServiceExt};
use tower_model_balance::balance::BalanceConfig;
use tower_model_balance::breaker::{BreakerConfig, BreakerState, CircuitBreakerLayer};
use tower_model_balance::classify::Outcome;
use tower_model_balance::config::StackConfig;
use tower_model_balance::error::BreakerOpen;
use tower_model_balance::hedge::{HedgeConfig, HedgeLayer};

const BREAKER_ONLY: &str = "[breaker]\nwindow = 3\nminimum_calls = 3\nopen_duration_ms = 750\n";

#[tokio::test]
async fn a_file_with_only_a_breaker_table_builds_a_standalone_breaker() {
    let config = StackConfig::from_toml(BREAKER_ONLY).unwrap();
    let expected = BreakerConfig::builder()
        .window(3)
        .minimum_calls(3)
        .open_duration(Duration::from_millis(750))
        .build()
        .unwrap();
    assert_eq!(config.breaker, expected);
    // The balancer's per-backend breakers get the same policy.
    let balance = BalanceConfig::builder()
        .breaker(expected.clone())
        .build()
        .unwrap();
    assert_eq!(config.balance, balance);

    // In force: three failures open it (the default needs ten calls).
    let failing = service_fn(|_: ()| async { Err::<(), _>(std::io::Error::other("down")) });
    let breaker = CircuitBreakerLayer::new(config.breaker)
        .classifier(|r: Result<&(), &std::io::Error>| match r {
            Ok(()) => Outcome::Success,
            Err(_) => Outcome::Failure,
        })
        .at_response()
        .layer(failing);
    assert_eq!(breaker.breaker().config(), expected, "the file's, in force");
    for _ in 0..3 {
        let err = breaker.clone().oneshot(()).await.unwrap_err();
        assert!(err.is::<std::io::Error>(), "{err}");
    }
    assert_eq!(breaker.breaker().state(), BreakerState::Open);
    let err = breaker.oneshot(()).await.unwrap_err();
    assert!(err.is::<BreakerOpen>(), "{err}");
}

#[tokio::test]
async fn a_file_with_only_a_hedge_table_builds_a_standalone_hedge() {
    let config = StackConfig::from_toml("[hedge]\nmax_attempts = 1\nceiling_ms = 300\n").unwrap();
    let expected = HedgeConfig::builder()
        .max_attempts(1)
        .ceiling(Duration::from_millis(300))
        .build()
        .unwrap();
    assert_eq!(config.hedge, expected);
    assert_eq!(config.breaker, BreakerConfig::default(), "left out");

    // In force: `max_attempts = 1` turns hedging off, counted as such.
    let answer = service_fn(|_: http::Request<()>| async {
        Ok::<_, std::io::Error>(http::Response::new(()))
    });
    for (file, disabled) in [(config, 1), (StackConfig::from_toml("").unwrap(), 0)] {
        let layer = HedgeLayer::new(file.hedge);
        let hedges = layer.handle();
        let req = http::Request::builder()
            .header("x-model-id", "resnet-50")
            .body(())
            .unwrap();
        layer.layer(answer).oneshot(req).await.unwrap();
        assert_eq!(hedges.stats().disabled, disabled);
    }
}

#[test]
fn the_example_file_configures_every_layer() {
    let example = include_str!("../../examples/stack.toml");
    let config = StackConfig::from_toml(example).unwrap();
    assert_eq!(config.breaker, BreakerConfig::default());
    assert_eq!(config.hedge, HedgeConfig::default());
    assert_eq!(config.balance, BalanceConfig::default());
    // Each table alone is the layer's settings, whatever else is there.
    let text = format!("{example}\n").replace("open_duration_ms = 5000", "open_duration_ms = 750");
    let config = StackConfig::from_toml(&text).unwrap();
    let open = BreakerConfig::builder()
        .open_duration(Duration::from_millis(750))
        .build()
        .unwrap();
    assert_eq!(config.breaker, open);
}

#[test]
fn the_breaker_table_round_trips_through_to_toml() {
    for text in [
        "",
        BREAKER_ONLY,
        "[breaker]\ntime_window_ms = 2000\ntime_window_buckets = 4",
    ] {
        let config = StackConfig::from_toml(text).unwrap();
        let written = config.to_toml();
        let read = StackConfig::from_toml(&written).unwrap_or_else(|e| panic!("{e}\n{written}"));
        assert_eq!(read.breaker, config.breaker, "{written}");
        assert_eq!(read.balance, config.balance, "{written}");
    }
    // Set in code, written, read back into both.
    let mut config = StackConfig::from_toml("").unwrap();
    config.breaker = BreakerConfig::builder()
        .consecutive_failures(4)
        .build()
        .unwrap();
    let written = config.to_toml();
    assert!(written.contains("consecutive_failures = 4"), "{written}");
    let read = StackConfig::from_toml(&written).unwrap();
    assert_eq!(read.breaker, config.breaker);
    let balance = BalanceConfig::builder()
        .breaker(config.breaker)
        .build()
        .unwrap();
    assert_eq!(read.balance, balance);
}
