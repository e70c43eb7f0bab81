//! The whole stack's configuration from a TOML file, into the validated
//! builders (feature `serde`).
//!
//! Every section and key is optional: what a file leaves out keeps its
//! default. Durations carry their unit in the key (`_ms`). An unknown key,
//! a value of the wrong type, or a value out of its builder's range is an
//! error naming the key (`balance.load_factor`) and, for a range, what it
//! must be. `examples/stack.toml` lists every key with its default.
//!
//! ```
//! use std::time::Duration;
//! use tower_model_balance::config::StackConfig;
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
//! "#).unwrap();
//! assert_eq!(config.balance.owners(), 3);
//! assert_eq!(config.balance.breaker().open_duration(), Duration::from_secs(2));
//! assert_eq!(config.probe.interval(), Duration::from_secs(1));
//!
//! let error = StackConfig::from_toml("[balance]\nload_factor = 0.5").unwrap_err();
//! assert_eq!(error.to_string(), "invalid config: `balance.load_factor` must be 1.0 ..= 100.0");
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use crate::balance::{BalanceConfig, BalanceConfigBuilder, BreakerScope, Classification, Staging};
use crate::breaker::Policy;
use crate::error::InvalidConfig;
use crate::health::probe::ProbeConfig;
use crate::health::HealthPolicy;
use crate::placement::{PlacementPolicy, WhenCold};
use crate::ring::RingConfig;
use crate::route::ModelId;

/// The stack's settings, each validated by its builder.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StackConfig {
    /// The balancer's, with its breaker and health policies inside
    /// ([`BalanceConfig::breaker`], [`BalanceConfig::health`]).
    pub balance: BalanceConfig,
    /// Active probes.
    pub probe: ProbeConfig,
    /// On-demand placement.
    pub placement: PlacementPolicy,
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
/// file's key.
fn invalid(section: &str, error: InvalidConfig) -> ConfigError {
    let key = match error.field {
        "breaker_scope" => "max_pairs".to_string(),
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
const DURATIONS: [&str; 13] = [
    "interval",
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

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    balance: BalanceFile,
    #[serde(default)]
    breaker: BreakerFile,
    #[serde(default)]
    health: HealthFile,
    #[serde(default)]
    probe: ProbeFile,
    #[serde(default)]
    placement: PlacementFile,
}

impl File {
    fn build(self) -> Result<StackConfig, ConfigError> {
        let breaker = self.breaker.build()?;
        let health = self.health.build()?;
        let balance = self.balance.build(breaker, health)?;
        Ok(StackConfig {
            balance,
            probe: self.probe.build()?,
            placement: self.placement.build()?,
        })
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BalanceFile {
    owners: Option<usize>,
    min_owners: Option<usize>,
    load_factor: Option<f64>,
    panic_threshold: Option<f64>,
    /// Owners fixed per model ID.
    model_owners: Option<BTreeMap<String, usize>>,
    vnodes_per_weight: Option<u32>,
    ring_seed: Option<u64>,
    /// `"backend"` or `"backend_model"`.
    breaker_scope: Option<String>,
    max_pairs: Option<usize>,
    staging_max_share: Option<f64>,
    staging_cooldown_ms: Option<u64>,
    /// `"http_status"` or `"grpc_status"`.
    classification: Option<String>,
}

impl BalanceFile {
    fn build(self, breaker: Policy, health: HealthPolicy) -> Result<BalanceConfig, ConfigError> {
        let err = |e| invalid("balance", e);
        let mut b = BalanceConfig::builder().breaker(breaker).health(health);
        if let Some(k) = self.owners {
            b = b.owners(k);
        }
        if let Some(k) = self.min_owners {
            b = b.min_owners(k);
        }
        if let Some(c) = self.load_factor {
            b = b.load_factor(c);
        }
        if let Some(share) = self.panic_threshold {
            b = b.panic_threshold(share);
        }
        for (model, k) in self.model_owners.unwrap_or_default() {
            let key = || format!("balance.model_owners.{model:?}");
            if !(1..=BalanceConfigBuilder::MAX_OWNERS).contains(&k) {
                return Err(ConfigError::Invalid {
                    key: key(),
                    expected: "1 ..= 16 owners",
                });
            }
            let model = ModelId::new(&model).map_err(|_| ConfigError::Invalid {
                key: key(),
                expected: "a valid model ID",
            })?;
            b = b.model_owners(model, k);
        }
        if self.vnodes_per_weight.is_some() || self.ring_seed.is_some() {
            let defaults = RingConfig::default();
            let ring = RingConfig::new(
                self.ring_seed.unwrap_or(0),
                self.vnodes_per_weight
                    .unwrap_or(defaults.vnodes_per_weight()),
            )
            .map_err(err)?;
            b = b.ring(ring);
        }
        match (self.breaker_scope.as_deref(), self.max_pairs) {
            (None | Some("backend"), None) => {}
            (Some("backend_model"), max_pairs) => {
                b = b.breaker_scope(BreakerScope::BackendModel {
                    max_pairs: max_pairs.unwrap_or(10_000),
                });
            }
            (None | Some("backend"), Some(_)) => {
                return Err(ConfigError::Invalid {
                    key: "balance.max_pairs".into(),
                    expected: "set only with breaker_scope = \"backend_model\"",
                })
            }
            (Some(_), _) => {
                return Err(ConfigError::Invalid {
                    key: "balance.breaker_scope".into(),
                    expected: "\"backend\" or \"backend_model\"",
                })
            }
        }
        match self.classification.as_deref() {
            None | Some("http_status") => {}
            Some("grpc_status") => b = b.classification(Classification::GrpcStatus),
            Some(_) => {
                return Err(ConfigError::Invalid {
                    key: "balance.classification".into(),
                    expected: "\"http_status\" or \"grpc_status\"",
                })
            }
        }
        if self.staging_max_share.is_some() || self.staging_cooldown_ms.is_some() {
            let defaults = Staging::default();
            let staging = Staging::new(
                self.staging_max_share.unwrap_or(defaults.max_share()),
                self.staging_cooldown_ms.map_or(defaults.cooldown(), ms),
            )
            .map_err(err)?;
            b = b.staging(staging);
        }
        b.build().map_err(err)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BreakerFile {
    window: Option<usize>,
    time_window_ms: Option<u64>,
    time_window_buckets: Option<u32>,
    minimum_calls: Option<usize>,
    failure_rate_threshold: Option<f64>,
    slow_call_rate_threshold: Option<f64>,
    slow_call_duration_ms: Option<u64>,
    consecutive_failures: Option<u32>,
    half_open_permits: Option<u32>,
    half_open_max_wait_ms: Option<u64>,
    open_duration_ms: Option<u64>,
    max_open_duration_ms: Option<u64>,
    jitter: Option<bool>,
}

impl BreakerFile {
    fn build(self) -> Result<Policy, ConfigError> {
        let mut b = Policy::builder();
        if let (Some(_), Some(_)) = (self.window, self.time_window_ms) {
            return Err(ConfigError::Invalid {
                key: "breaker.window".into(),
                expected: "unset when time_window_ms is set",
            });
        }
        if let Some(calls) = self.window {
            b = b.window(calls);
        }
        match (self.time_window_ms, self.time_window_buckets) {
            (Some(window), buckets) => b = b.time_window(ms(window), buckets.unwrap_or(10)),
            (None, Some(_)) => {
                return Err(ConfigError::Invalid {
                    key: "breaker.time_window_buckets".into(),
                    expected: "set only with time_window_ms",
                })
            }
            (None, None) => {}
        }
        if let Some(calls) = self.minimum_calls {
            b = b.minimum_calls(calls);
        }
        if let Some(rate) = self.failure_rate_threshold {
            b = b.failure_rate_threshold(rate);
        }
        if let Some(rate) = self.slow_call_rate_threshold {
            b = b.slow_call_rate_threshold(rate);
        }
        if let Some(d) = self.slow_call_duration_ms {
            b = b.slow_call_duration(ms(d));
        }
        if let Some(n) = self.consecutive_failures {
            b = b.consecutive_failures(n);
        }
        if let Some(n) = self.half_open_permits {
            b = b.half_open_permits(n);
        }
        if let Some(d) = self.half_open_max_wait_ms {
            b = b.half_open_max_wait(ms(d));
        }
        if let Some(d) = self.open_duration_ms {
            b = b.open_duration(ms(d));
        }
        if let Some(d) = self.max_open_duration_ms {
            b = b.max_open_duration(ms(d));
        }
        if let Some(on) = self.jitter {
            b = b.jitter(on);
        }
        b.build().map_err(|e| invalid("breaker", e))
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Weights {
    latency: Option<f64>,
    capacity: Option<f64>,
    connection: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HealthFile {
    weights: Option<Weights>,
    interval_ms: Option<u64>,
    error_alpha: Option<f64>,
    latency_alpha: Option<f64>,
    failure_penalty_ms: Option<u64>,
    relax_half_life_ms: Option<u64>,
    eject_below: Option<f64>,
    readmit_above: Option<f64>,
    queue_scale: Option<f64>,
    connections_full_below: Option<u32>,
    connections_zero_at: Option<u32>,
    /// 0 turns latency-outlier ejection off.
    outlier_factor: Option<f64>,
    outlier_ejection_ms: Option<u64>,
    max_ejected_share: Option<f64>,
    warm_up_ms: Option<u64>,
    warm_up_min_weight: Option<f64>,
}

impl HealthFile {
    fn build(self) -> Result<HealthPolicy, ConfigError> {
        let defaults = HealthPolicy::default();
        let mut b = HealthPolicy::builder();
        if let Some(w) = self.weights {
            // A weight left out keeps its default.
            let [latency, capacity, connection] = defaults.weights();
            b = b.weights(
                w.latency.unwrap_or(latency),
                w.capacity.unwrap_or(capacity),
                w.connection.unwrap_or(connection),
            );
        }
        if let Some(d) = self.interval_ms {
            b = b.interval(ms(d));
        }
        if let Some(a) = self.error_alpha {
            b = b.error_alpha(a);
        }
        if let Some(a) = self.latency_alpha {
            b = b.latency_alpha(a);
        }
        if let Some(d) = self.failure_penalty_ms {
            b = b.failure_penalty(ms(d));
        }
        if let Some(d) = self.relax_half_life_ms {
            b = b.relax_half_life(ms(d));
        }
        if self.eject_below.is_some() || self.readmit_above.is_some() {
            b = b.thresholds(
                self.eject_below.unwrap_or(defaults.eject_below()),
                self.readmit_above.unwrap_or(defaults.readmit_above()),
            );
        }
        if let Some(q) = self.queue_scale {
            b = b.queue_scale(q);
        }
        if self.connections_full_below.is_some() || self.connections_zero_at.is_some() {
            let (full, zero) = defaults.connections();
            b = b.connections(
                self.connections_full_below.unwrap_or(full),
                self.connections_zero_at.unwrap_or(zero),
            );
        }
        if let Some(f) = self.outlier_factor {
            b = b.outlier_factor((f != 0.0).then_some(f));
        }
        if let Some(d) = self.outlier_ejection_ms {
            b = b.outlier_ejection(ms(d));
        }
        if let Some(s) = self.max_ejected_share {
            b = b.max_ejected_share(s);
        }
        if let Some(d) = self.warm_up_ms {
            b = b.warm_up(ms(d));
        }
        if let Some(w) = self.warm_up_min_weight {
            b = b.warm_up_min_weight(w);
        }
        b.build().map_err(|e| invalid("health", e))
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProbeFile {
    interval_ms: Option<u64>,
    timeout_ms: Option<u64>,
    jitter: Option<f64>,
    concurrency: Option<usize>,
}

impl ProbeFile {
    fn build(self) -> Result<ProbeConfig, ConfigError> {
        let mut b = ProbeConfig::builder();
        if let Some(d) = self.interval_ms {
            b = b.interval(ms(d));
        }
        if let Some(d) = self.timeout_ms {
            b = b.timeout(ms(d));
        }
        if let Some(j) = self.jitter {
            b = b.jitter(j);
        }
        if let Some(n) = self.concurrency {
            b = b.concurrency(n);
        }
        b.build().map_err(|e| invalid("probe", e))
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlacementFile {
    load_timeout_ms: Option<u64>,
    /// `"wait"` or `"prefer_warm"`.
    when_cold: Option<String>,
    repository_interval_ms: Option<u64>,
    evict: Option<bool>,
}

impl PlacementFile {
    fn build(self) -> Result<PlacementPolicy, ConfigError> {
        let mut b = PlacementPolicy::builder();
        if let Some(d) = self.load_timeout_ms {
            b = b.load_timeout(ms(d));
        }
        match self.when_cold.as_deref() {
            None => {}
            Some("wait") => b = b.when_cold(WhenCold::Wait),
            Some("prefer_warm") => b = b.when_cold(WhenCold::PreferWarm),
            Some(_) => {
                return Err(ConfigError::Invalid {
                    key: "placement.when_cold".into(),
                    expected: "\"wait\" or \"prefer_warm\"",
                })
            }
        }
        if let Some(d) = self.repository_interval_ms {
            b = b.repository_interval(ms(d));
        }
        if let Some(on) = self.evict {
            b = b.evict(on);
        }
        b.build().map_err(|e| invalid("placement", e))
    }
}
