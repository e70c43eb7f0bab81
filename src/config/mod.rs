//! The whole stack's configuration from a TOML file, into the validated
//! builders (feature `config`).
//!
//! One file configures the whole stack or any layer used alone:
//! [`StackConfig`] holds a field a layer — `balance` (the balancer, with
//! the `[breaker]` and `[health]` tables inside), `breaker` (the
//! `[breaker]` table, for a standalone
//! [`CircuitBreakerLayer`](crate::breaker::CircuitBreakerLayer)), `hedge`
//! (for [`HedgeLayer`](crate::hedge::HedgeLayer)), `probe`, `placement` —
//! so a file with only `[breaker]` (or only `[hedge]`) is a breaker's (a
//! hedge's) whole configuration.
//!
//! Every section and key is optional: what a file leaves out keeps its
//! default. Durations carry their unit in the key (`_ms`). An unknown key
//! or a value of the wrong type is a [`ConfigError::Parse`] with the
//! parser's message: its line and column and the offending line. A value
//! out of its builder's range is a [`ConfigError::Invalid`] naming the key
//! (`balance.load_factor`) and what it must be, in the builder's own words:
//! every section goes through its builder (`[hedge]` through
//! [`HedgeConfig::builder`](crate::hedge::HedgeConfig::builder), and so on),
//! which alone validates; the file adds the key as context. An integer
//! the key cannot hold (a negative one, or one too large for it) is out
//! of range too, in the same words (`` `balance.owners` must be 1 ..=
//! 1024 `` for `owners = -1`), not the parser's `expected u64`. `examples/stack.toml` lists every key with its default.
//! [`StackConfig::to_toml`] writes the settings back as such a file (every
//! key, the values in force), which reads back into the same settings.
//!
//! ```
//! use std::time::Duration;
//! use tower_model_balance::balance::BalanceConfig;
//! use tower_model_balance::breaker::BreakerConfig;
//! use tower_model_balance::config::StackConfig;
//! use tower_model_balance::health::probe::ProbeConfig;
//! use tower_model_balance::hedge::HedgeConfig;
//!
//! let config = StackConfig::from_toml(r#"
//!     [balance]
//!     owners = 3
//!     load_factor = 1.5
//!
//!     [breaker]
//!     open_duration_ms = 2000
//!
//!     [probe]
//!     interval_ms = 1000
//!
//!     [hedge]
//!     percentile = 0.9
//!     ceiling_ms = 500
//! "#).unwrap();
//! let breaker = BreakerConfig::builder().open_duration(Duration::from_secs(2)).build().unwrap();
//! assert_eq!(config.breaker, breaker);
//! let balance = BalanceConfig::builder().owners(3).load_factor(1.5).breaker(breaker).build().unwrap();
//! assert_eq!(config.balance, balance);
//! let probe = ProbeConfig::builder().interval(Duration::from_secs(1)).build().unwrap();
//! assert_eq!(config.probe, probe);
//! let hedge = HedgeConfig::builder().percentile(0.9).ceiling(Duration::from_millis(500)).build().unwrap();
//! assert_eq!(config.hedge, hedge);
//!
//! // A breaker used alone, from the same table.
//! let alone = StackConfig::from_toml("[breaker]\nopen_duration_ms = 2000").unwrap();
//! let layer = tower_model_balance::breaker::CircuitBreakerLayer::new(alone.breaker);
//! # drop(layer);
//!
//! let error = StackConfig::from_toml("[balance]\nload_factor = 0.5").unwrap_err();
//! assert_eq!(error.to_string(), "invalid config: `balance.load_factor` must be 1.0 ..= 100.0");
//! ```

mod admission;
mod balance;
mod breaker;
mod error;
mod file;
mod health;
mod hedge;
mod keys;
mod placement;

pub use self::error::ConfigError;
pub use self::file::StackConfig;
