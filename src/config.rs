//! The whole stack's configuration from a TOML file, into the validated
//! builders (feature `serde`).
//!
//! Every section and key is optional: what a file leaves out keeps its
//! default. Durations carry their unit in the key (`_ms`). An unknown key
//! or a value of the wrong type is a [`ConfigError::Parse`] with the
//! parser's message: its line and column and the offending line. A value
//! out of its builder's range is a [`ConfigError::Invalid`] naming the key
//! (`balance.load_factor`) and what it must be. `examples/stack.toml` lists every key with its default.
//! [`StackConfig::to_toml`] writes the settings back as such a file (every
//! key, the values in force), which reads back into the same settings.
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

use serde::{Deserialize, Serialize};

use crate::balance::{BalanceConfig, BalanceConfigBuilder, BreakerScope, Classification, Staging};
use crate::breaker::Policy;
use crate::breaker::SlidingWindow;
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

    /// The settings as a TOML file that [`from_toml`](Self::from_toml)
    /// reads back into the same settings: every key written, durations in
    /// whole milliseconds (rounded up: a sub-millisecond part set in code
    /// is not kept). The builders' settings that have no key (the
    /// balancer's residency header) are left out.
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
    // The builders' words for a value the file spells otherwise.
    let expected = match error.field {
        "breaker_scope" => "1 ..= 1 000 000",
        "outlier_factor" => "1.5 ..= 1000, or 0 (off)",
        _ => error.expected,
    };
    ConfigError::Invalid {
        key: format!("{section}.{key}"),
        expected,
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

#[derive(Debug, Default, Deserialize, Serialize)]
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
    /// Every setting of `config`, as its key.
    fn of(config: &StackConfig) -> Self {
        let b = &config.balance;
        let (breaker_scope, max_pairs) = match b.breaker_scope() {
            BreakerScope::BackendModel { max_pairs } => ("backend_model", Some(max_pairs)),
            _ => ("backend", None),
        };
        let balance = BalanceFile {
            owners: Some(b.owners()),
            min_owners: Some(b.min_owners()),
            load_factor: Some(b.load_factor()),
            panic_threshold: Some(b.panic_threshold()),
            latency_decay_ms: to_ms(b.latency_decay()),
            model_owners: (!b.model_owners().is_empty()).then(|| {
                b.model_owners()
                    .iter()
                    .map(|(model, k)| (model.as_str().to_owned(), *k))
                    .collect()
            }),
            vnodes_per_weight: Some(b.ring().vnodes_per_weight()),
            ring_seed: Some(RingSeed(b.ring().seed())),
            breaker_scope: Some(breaker_scope.to_owned()),
            max_pairs,
            staging_max_share: Some(b.staging().max_share()),
            staging_cooldown_ms: to_ms(b.staging().cooldown()),
            classification: Some(
                match b.classification() {
                    Classification::GrpcStatus => "grpc_status",
                    _ => "http_status",
                }
                .to_owned(),
            ),
        };
        let p = b.breaker();
        let (window, time_window_ms, time_window_buckets) = match p.window() {
            SlidingWindow::Time { duration, buckets } => (None, to_ms(duration), Some(buckets)),
            SlidingWindow::Count { calls } => (Some(calls), None, None),
        };
        let breaker = BreakerFile {
            window,
            time_window_ms,
            time_window_buckets,
            minimum_calls: Some(p.minimum_calls()),
            failure_rate_threshold: Some(p.failure_rate_threshold()),
            slow_call_rate_threshold: Some(p.slow_call_rate_threshold()),
            slow_call_duration_ms: to_ms(p.slow_call_duration()),
            consecutive_failures: p.consecutive_failures(),
            half_open_permits: Some(p.half_open_permits()),
            half_open_max_wait_ms: to_ms(p.half_open_max_wait()),
            open_duration_ms: to_ms(p.open_duration()),
            max_open_duration_ms: to_ms(p.max_open_duration()),
            jitter: Some(p.jitter()),
        };
        let h = b.health();
        let [latency, capacity, connection] = h.weights();
        let (full, zero) = h.connections();
        let health = HealthFile {
            weights: Some(Weights {
                latency: Some(latency),
                capacity: Some(capacity),
                connection: Some(connection),
            }),
            interval_ms: to_ms(h.interval()),
            error_alpha: Some(h.error_alpha()),
            latency_alpha: Some(h.latency_alpha()),
            failure_penalty_ms: to_ms(h.failure_penalty()),
            relax_half_life_ms: to_ms(h.relax_half_life()),
            eject_below: Some(h.eject_below()),
            readmit_above: Some(h.readmit_above()),
            queue_scale: Some(h.queue_scale()),
            connections_full_below: Some(full),
            connections_zero_at: Some(zero),
            outlier_factor: Some(h.outlier_factor().unwrap_or(0.0)),
            outlier_ejection_ms: to_ms(h.outlier_ejection()),
            max_ejected_share: Some(h.max_ejected_share()),
            warm_up_ms: to_ms(h.warm_up()),
            warm_up_min_weight: Some(h.warm_up_min_weight()),
        };
        let probe = ProbeFile {
            interval_ms: to_ms(config.probe.interval()),
            timeout_ms: to_ms(config.probe.timeout()),
            jitter: Some(config.probe.jitter()),
            concurrency: Some(config.probe.concurrency()),
        };
        let placement = PlacementFile {
            load_timeout_ms: to_ms(config.placement.load_timeout()),
            when_cold: Some(
                match config.placement.when_cold() {
                    WhenCold::PreferWarm => "prefer_warm",
                    _ => "wait",
                }
                .to_owned(),
            ),
            repository_interval_ms: to_ms(config.placement.repository_interval()),
            evict: Some(config.placement.evict()),
        };
        File {
            balance,
            breaker,
            health,
            probe,
            placement,
        }
    }

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

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct BalanceFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    owners: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_owners: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    load_factor: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    panic_threshold: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    latency_decay_ms: Option<u64>,
    /// Owners fixed per model ID.
    #[serde(skip_serializing_if = "Option::is_none")]
    model_owners: Option<BTreeMap<String, usize>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    vnodes_per_weight: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ring_seed: Option<RingSeed>,
    /// `"backend"` or `"backend_model"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    breaker_scope: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_pairs: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    staging_max_share: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    staging_cooldown_ms: Option<u64>,
    /// `"http_status"` or `"grpc_status"`.
    classification: Option<String>,
}

/// `balance.ring_seed`: a TOML integer, or a string (decimal or `0x` hex)
/// for seeds above `i64::MAX`, which TOML 1.0 integers cannot hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RingSeed(u64);

impl Serialize for RingSeed {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match i64::try_from(self.0) {
            Ok(seed) => serializer.serialize_i64(seed),
            Err(_) => serializer.serialize_str(&format!("{:#x}", self.0)),
        }
    }
}

impl<'de> Deserialize<'de> for RingSeed {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(RingSeedVisitor)
    }
}

struct RingSeedVisitor;

impl serde::de::Visitor<'_> for RingSeedVisitor {
    type Value = RingSeed;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "an integer in 0 ..= 18446744073709551615, as a string (decimal or 0x hex) \
             above 9223372036854775807",
        )
    }

    fn visit_u64<E: serde::de::Error>(self, seed: u64) -> Result<RingSeed, E> {
        Ok(RingSeed(seed))
    }

    fn visit_i64<E: serde::de::Error>(self, seed: i64) -> Result<RingSeed, E> {
        u64::try_from(seed)
            .map(RingSeed)
            .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(seed), &self))
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<RingSeed, E> {
        // Digits only: no sign, which `from_str_radix` would accept.
        let (digits, radix) = match text.strip_prefix("0x") {
            Some(hex) => (hex, 16),
            None => (text, 10),
        };
        let all_digits = digits.chars().all(|c| c.is_digit(radix));
        u64::from_str_radix(digits, radix)
            .ok()
            .filter(|_| all_digits)
            .map(RingSeed)
            .ok_or_else(|| E::invalid_value(serde::de::Unexpected::Str(text), &self))
    }
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
        if let Some(tau) = self.latency_decay_ms {
            b = b.latency_decay(ms(tau));
        }
        for (model, k) in self.model_owners.unwrap_or_default() {
            let key = || format!("balance.model_owners.{model:?}");
            if !(1..=BalanceConfigBuilder::MAX_OWNERS).contains(&k) {
                return Err(ConfigError::Invalid {
                    key: key(),
                    expected: "1 ..= 1024 owners",
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
            let seed = self.ring_seed.map_or(0, |seed| seed.0);
            let ring = RingConfig::new(
                seed,
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

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct BreakerFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    window: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    time_window_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    time_window_buckets: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    minimum_calls: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failure_rate_threshold: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    slow_call_rate_threshold: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    slow_call_duration_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    consecutive_failures: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    half_open_permits: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    half_open_max_wait_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    open_duration_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_open_duration_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
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

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct Weights {
    #[serde(skip_serializing_if = "Option::is_none")]
    latency: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    capacity: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    connection: Option<f64>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct HealthFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    weights: Option<Weights>,
    #[serde(skip_serializing_if = "Option::is_none")]
    interval_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error_alpha: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    latency_alpha: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failure_penalty_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    relax_half_life_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    eject_below: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    readmit_above: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    queue_scale: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    connections_full_below: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    connections_zero_at: Option<u32>,
    /// 0 turns latency-outlier ejection off.
    #[serde(skip_serializing_if = "Option::is_none")]
    outlier_factor: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    outlier_ejection_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_ejected_share: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    warm_up_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
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

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct ProbeFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    interval_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timeout_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    jitter: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
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

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct PlacementFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    load_timeout_ms: Option<u64>,
    /// `"wait"` or `"prefer_warm"`.
    #[serde(skip_serializing_if = "Option::is_none")]
    when_cold: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    repository_interval_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
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
