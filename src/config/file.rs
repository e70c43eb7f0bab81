//! [`StackConfig`], and the file's shape: one table a section, and the
//! settings into and out of it; an integer its key cannot hold, named by
//! the key with its range.

use serde::{Deserialize, Serialize};

use super::admission::AdmissionFile;
use super::balance::{BalanceFile, RingSeed};
use super::breaker::BreakerFile;
use super::error::ConfigError;
use super::health::{HealthFile, ProbeFile, Weights};
use super::hedge::HedgeFile;
use super::keys::to_ms;
use super::placement::PlacementFile;
use crate::balance::{BalanceConfig, BreakerScope};
use crate::breaker::{BreakerConfig, SlidingWindow};
use crate::classify::timing::StopPoint;
use crate::classify::Classifier;
use crate::health::probe::ProbeConfig;
use crate::hedge::HedgeConfig;
use crate::placement::{PlacementConfig, WhenCold};

/// The stack's settings, each validated by its builder: one field a
/// layer, so that each layer used alone — the breaker
/// ([`CircuitBreakerLayer::new`](crate::breaker::CircuitBreakerLayer::new)`(config.breaker)`),
/// the hedge ([`HedgeLayer::new`](crate::hedge::HedgeLayer::new)`(config.hedge)`)
/// — loads from the same file as the whole stack.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StackConfig {
    /// The balancer's, with its breaker and health policies inside
    /// ([`BalanceConfigBuilder::breaker`](crate::balance::BalanceConfigBuilder::breaker):
    /// the `[breaker]` table, as [`breaker`](Self::breaker);
    /// [`BalanceConfigBuilder::health`](crate::balance::BalanceConfigBuilder::health):
    /// the `[health]` table).
    pub balance: BalanceConfig,
    /// The `[breaker]` table, for a
    /// [`CircuitBreakerLayer`](crate::breaker::CircuitBreakerLayer) used
    /// alone; the balancer's per-backend breakers get the same value
    /// inside [`balance`](Self::balance). Default
    /// [`BreakerConfig::default`] when the file has no `[breaker]`.
    pub breaker: BreakerConfig,
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
        let file: File = toml::from_str(text).map_err(|e| {
            // A negative integer: the key and its range, not `expected u64`.
            out_of_type(text).unwrap_or_else(|| ConfigError::Parse(e.to_string()))
        })?;
        file.build()
    }

    /// The settings as a TOML file that [`from_toml`](Self::from_toml)
    /// reads back into the same settings: every key written, durations in
    /// whole milliseconds (rounded up: a sub-millisecond part set in code
    /// is not kept). The builders' settings that have no key (the
    /// balancer's residency header, a breaker-transition hook, a
    /// classifier of your own: `classification` is written only for
    /// `Classifier::http` and `Classifier::grpc`) are left out. The
    /// `[breaker]` table is written from [`breaker`](Self::breaker) (a file
    /// read gives it and the balancer the same policy): a breaker policy
    /// changed in code is written when it is set there.
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

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct File {
    #[serde(default)]
    pub(super) balance: BalanceFile,
    #[serde(default)]
    pub(super) breaker: BreakerFile,
    #[serde(default)]
    pub(super) health: HealthFile,
    #[serde(default)]
    pub(super) probe: ProbeFile,
    #[serde(default)]
    pub(super) placement: PlacementFile,
    #[serde(default)]
    pub(super) hedge: HedgeFile,
    /// Absent: no admission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) admission: Option<AdmissionFile>,
}

impl File {
    /// Every setting of `config`, as its key.
    pub(super) fn of(config: &StackConfig) -> Self {
        let b = &config.balance;
        let (breaker_scope, max_pairs) = match b.breaker_scope() {
            BreakerScope::BackendModel { max_pairs } => ("backend_model", Some(max_pairs)),
            _ => ("backend", None),
        };
        let balance = BalanceFile {
            owners: Some(b.owners()),
            min_owners: Some(b.min_owners()),
            load_factor: Some(b.load_factor()),
            // Written only when set: unset, it follows `load_factor`.
            owner_load: b.owner_load,
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
            // A classifier of the caller's own has no TOML form: left out.
            classification: match &b.classifier {
                c if *c == Classifier::grpc() => Some("grpc_status".to_owned()),
                c if *c == Classifier::http() => Some("http_status".to_owned()),
                _ => None,
            },
            stop_point: Some(
                match b.stop_point {
                    StopPoint::Headers => "headers",
                    StopPoint::EndOfBody => "end_of_body",
                    _ => "first_frame",
                }
                .to_owned(),
            ),
            receipts: Some(b.receipts),
        };
        let p = &config.breaker;
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
            hedge: HedgeFile::of(&config.hedge),
            admission: b.admission.as_ref().map(AdmissionFile::of),
        }
    }

    pub(super) fn build(self) -> Result<StackConfig, ConfigError> {
        let breaker = self.breaker.build()?;
        let health = self.health.build()?;
        let admission = self.admission.map(AdmissionFile::build).transpose()?;
        let balance = self.balance.build(breaker.clone(), health, admission)?;
        Ok(StackConfig {
            balance,
            breaker,
            probe: self.probe.build()?,
            placement: self.placement.build()?,
            hedge: self.hedge.build()?,
        })
    }
}

// === integers out of their key's type ===

/// The error for a file whose fault is an integer its key's type cannot
/// hold — a negative one (every integer key is unsigned), or one above
/// `u32::MAX` for a `u32` key — named by its key with what the key must
/// be in its builder's words, as any value out of range is, rather than
/// the parser's `expected u64`. `None` when the file has another fault:
/// the parser's message stands.
///
/// The builder's words come from building the file with the integer at
/// the nearest end of the type (0 for a negative one) and then at the
/// largest values TOML holds, until the builder names the key. A key whose
/// builder takes them all (none today) is said to be `0 or more`.
pub(super) fn out_of_type(text: &str) -> Option<ConfigError> {
    let table: toml::Table = toml::from_str(text).ok()?;
    let mut candidates = Vec::new();
    integers(&table, &mut Vec::new(), &mut candidates);
    // `balance.ring_seed` reads its own two spellings and names its range
    // itself (a string above 2^63 − 1).
    candidates.retain(|(path, n)| {
        (*n < 0 || *n > i64::from(u32::MAX)) && path.join(".") != "balance.ring_seed"
    });
    let mut base = table.clone();
    for (path, _) in &candidates {
        set(&mut base, path, 0);
    }
    // Another fault than these integers: the parser's message.
    read(&base).ok()?;
    // Each integer back as written where its key takes it (a float key
    // takes an integer, a `u64` key one above `u32::MAX`): the first one
    // refused is the fault.
    let mut fault = None;
    for (path, n) in candidates {
        let mut restored = base.clone();
        set(&mut restored, &path, n);
        match read(&restored) {
            Ok(_) => base = restored,
            Err(_) => fault = fault.or(Some((path, n))),
        }
    }
    let (path, n) = fault?;
    let probes: &[i64] = match n < 0 {
        true => &[0, u32::MAX as i64, i64::MAX],
        false => &[u32::MAX as i64, i64::MAX],
    };
    let (section, leaf) = (&path[0], &path[path.len() - 1]);
    let mut other = None;
    for &probe in probes {
        let mut probed = base.clone();
        set(&mut probed, &path, probe);
        let Ok(file) = read(&probed) else { continue };
        match file.build() {
            Err(ConfigError::Invalid { key, expected })
                if key.starts_with(&format!("{section}.")) && key.contains(leaf.as_str()) =>
            {
                return Some(ConfigError::Invalid { key, expected });
            }
            // Another key's fault, the builder's first: said if this
            // key's words are not found.
            Err(error) => other = other.or(Some(error)),
            Ok(_) => {}
        }
    }
    Some(other.unwrap_or(ConfigError::Invalid {
        key: path.join("."),
        expected: "0 or more",
    }))
}

/// Every integer in `table`, with its path of keys.
fn integers(table: &toml::Table, path: &mut Vec<String>, out: &mut Vec<(Vec<String>, i64)>) {
    for (key, value) in table {
        path.push(key.clone());
        match value {
            toml::Value::Integer(n) => out.push((path.clone(), *n)),
            toml::Value::Table(inner) => integers(inner, path, out),
            _ => {}
        }
        path.pop();
    }
}

/// Sets the integer at `path` in `table` to `n`.
fn set(table: &mut toml::Table, path: &[String], n: i64) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut table = table;
    for key in parents {
        match table.get_mut(key) {
            Some(toml::Value::Table(inner)) => table = inner,
            _ => return,
        }
    }
    table.insert(last.clone(), toml::Value::Integer(n));
}

/// `table` as the file's shape.
fn read(table: &toml::Table) -> Result<File, toml::de::Error> {
    toml::Value::Table(table.clone()).try_into()
}
