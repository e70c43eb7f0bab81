//! The whole stack's configuration from a TOML file, into the validated
//! builders (feature `config`).
//!
//! Every section and key is optional: what a file leaves out keeps its
//! default. Durations carry their unit in the key (`_ms`). An unknown key
//! or a value of the wrong type is a [`ConfigError::Parse`] with the
//! parser's message: its line and column and the offending line. A value
//! out of its builder's range is a [`ConfigError::Invalid`] naming the key
//! (`balance.load_factor`) and what it must be, in the builder's own words:
//! every section goes through its builder (`[hedge]` through
//! [`HedgeConfig::builder`](crate::hedge::HedgeConfig::builder), and so on),
//! which alone validates; the file adds the key as context. `examples/stack.toml` lists every key with its default.
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
//! let balance = BalanceConfig::builder().owners(3).load_factor(1.5).breaker(breaker).build().unwrap();
//! assert_eq!(config.balance, balance);
//! let probe = ProbeConfig::builder().interval(Duration::from_secs(1)).build().unwrap();
//! assert_eq!(config.probe, probe);
//! let hedge = HedgeConfig::builder().percentile(0.9).ceiling(Duration::from_millis(500)).build().unwrap();
//! assert_eq!(config.hedge, hedge);
//!
//! let error = StackConfig::from_toml("[balance]\nload_factor = 0.5").unwrap_err();
//! assert_eq!(error.to_string(), "invalid config: `balance.load_factor` must be 1.0 ..= 100.0");
//! ```

use std::fmt;
use std::time::Duration;

use crate::balance::BalanceConfig;
use crate::error::InvalidConfig;
use crate::health::probe::ProbeConfig;
use crate::hedge::HedgeConfig;
use crate::placement::PlacementConfig;

mod admission;
mod balance;
mod breaker;
mod file;
mod health;
mod hedge;
mod placement;

use self::file::File;

/// The stack's settings, each validated by its builder.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StackConfig {
    /// The balancer's, with its breaker and health policies inside
    /// ([`BalanceConfigBuilder::breaker`](crate::balance::BalanceConfigBuilder::breaker),
    /// [`BalanceConfigBuilder::health`](crate::balance::BalanceConfigBuilder::health)).
    pub balance: BalanceConfig,
    /// Active probes.
    pub probe: ProbeConfig,
    /// On-demand placement.
    pub placement: PlacementConfig,
    /// Hedged requests (the `[hedge]` table), for
    /// [`HedgeLayer`](crate::hedge::HedgeLayer).
    pub hedge: HedgeConfig,
}

impl StackConfig {
    /// Parses `text` (TOML) and builds every section.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Parse`] for text that is not TOML, an unknown key or a
    /// value of the wrong type (with the line and column);
    /// [`ConfigError::Invalid`] for a value out of its range, naming the key.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let file: File = toml::from_str(text).map_err(|e| ConfigError::Parse(e.to_string()))?;
        file.build()
    }

    /// The settings as a TOML file that [`from_toml`](Self::from_toml)
    /// reads back into the same settings: every key written, durations in
    /// whole milliseconds (rounded up: a sub-millisecond part set in code
    /// is not kept). The builders' settings that have no key (the
    /// balancer's residency header, a breaker-transition hook, a
    /// classifier of your own: `classification` is written only for
    /// `Classifier::http` and `Classifier::grpc`) are left out.
    ///
    /// ```
    /// use tower_model_balance::config::StackConfig;
    ///
    /// let config = StackConfig::from_toml("[balance]\nowners = 3").unwrap();
    /// let text = config.to_toml();
    /// assert!(text.contains("owners = 3"));
    /// assert_eq!(StackConfig::from_toml(&text).unwrap().to_toml(), text);
    /// ```
    pub fn to_toml(&self) -> String {
        let file = File::of(self);
        // Every value is a TOML integer, float, boolean, string or table
        // of them: the serializer has nothing to refuse.
        toml::to_string(&file).expect("a StackConfig is always TOML")
    }
}

/// A configuration file that could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// Not TOML, an unknown key, or a value of the wrong type: the parser's
    /// message, with the line and column.
    Parse(String),
    /// A value out of its range.
    Invalid {
        /// The key, e.g. `balance.load_factor`.
        key: String,
        /// What it must be, e.g. `1.0 ..= 100.0`.
        expected: &'static str,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Parse(message) => write!(f, "invalid config file: {message}"),
            ConfigError::Invalid { key, expected } => {
                write!(f, "invalid config: `{key}` must be {expected}")
            }
        }
    }
}

impl std::error::Error for ConfigError {}

/// `error` from section `section`'s builder, its field named as the
/// file's key; what it must be is the builder's words, unchanged.
fn invalid(section: &str, error: InvalidConfig) -> ConfigError {
    let key = match error.field {
        "breaker_scope" => "max_pairs".to_string(),
        field if section == "hedge" && hedge::HEDGE_DURATIONS.contains(&field) => {
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

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// `d` in whole milliseconds, rounded up.
fn to_ms(d: Duration) -> Option<u64> {
    let ms = d.as_nanos().div_ceil(1_000_000);
    Some(u64::try_from(ms).unwrap_or(u64::MAX))
}
