//! The balancer's validated configuration: [`BalanceConfig`] and its
//! parts (the builder is in [`builder`](super::builder)).

use std::time::Duration;

use super::admission::AdmissionConfig;
use crate::breaker::events::Hook;
use crate::breaker::BreakerConfig;
use crate::classify::timing::StopPoint;
use crate::classify::Classifier;
use crate::error::InvalidConfig;
use crate::health::HealthConfig;
use crate::ring::RingConfig;
use crate::route::ModelId;
use http::HeaderName;

/// The default [`BalanceConfigBuilder::latency_decay`](super::BalanceConfigBuilder::latency_decay).
pub(crate) const DEFAULT_LATENCY_DECAY: Duration = Duration::from_secs(10);

/// How the balancer routes.
///
/// | field | default | range |
/// | --- | --- | --- |
/// | `owners` (k, the most a model gets) | 2 | 1 ..= 1024 |
/// | `min_owners` | 1 | 1 ..= `owners` |
/// | `load_factor` (c) | 1.25 | 1.0 ..= 100.0 |
/// | `owner_load` (what one model's traffic puts on each of its owners, × the mean per backend) | `load_factor` | above 0.0, up to `load_factor` |
/// | `panic_threshold` | 0.5 | 0.0 ..= 1.0 (0 turns panic mode off) |
/// | `latency_decay` (τ of an idle backend's latency estimate) | 10 s | 100 ms ..= 1 h |
/// | `model_owners` (per-model fixed `k`) | none | 1 ..= 1024 each |
/// | `ring` | seed 0, 150 vnodes per unit of weight | see [`RingConfig`] |
/// | `breaker` | [`BreakerConfig::default`] | see [`BreakerConfig`] |
/// | `breaker_scope` | [`BreakerScope::Backend`] | `BackendModel { max_pairs }`: 1 ..= 1 000 000 pairs |
/// | `staging` | 1% of the ring per step, 5 s apart | see [`StagingConfig`] |
/// | `health` | [`HealthConfig::default`] | see [`HealthConfig`] |
/// | `residency_header` | none | see [`ResidencyHeader`] |
/// | `classifier` | [`Classifier::http`] | [`Classifier::grpc`] for gRPC backends, or your own |
/// | `admission` (per-backend limits, shedding by urgency) | none: never refuses for load | see [`AdmissionConfig`] |
/// | `stop_point` (where a call's latency stops for its breaker's slow calls, health and the latency estimate) | [`StopPoint::FirstFrame`]: a stream's time to first token | [`StopPoint::Headers`], [`StopPoint::EndOfBody`] |
/// | `receipts` (a [`RoutingReceipt`](crate::balance::RoutingReceipt) per request) | off | on |
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BalanceConfig {
    /// The most owners (distinct backends of its ring walk) a model gets:
    /// `k`. Within `min_owners ..= owners`, a model gets as many as its
    /// share of recent work needs, `ceil(share × work × n / owner_load)`.
    pub(crate) owners: usize,
    /// The fewest owners a model gets, however cold.
    pub(crate) min_owners: usize,
    /// Bounded-load factor `c`: an owner with
    /// `ceil(c × (total in-flight + 1) / n)` requests in flight is passed over for the next owner
    /// (Mirrokni, Thorup and Zadimoghaddam, 2016).
    pub(crate) load_factor: f64,
    /// The load one model's traffic puts on each of its owners, over the
    /// mean load per backend; `None`: `load_factor`.
    pub(crate) owner_load: Option<f64>,
    /// Panic mode below this share of eligible backends.
    pub(crate) panic_threshold: f64,
    /// Time constant with which an idle backend's latency estimate relaxes
    /// toward the fleet's median.
    pub(crate) latency_decay: Duration,
    /// Models with a fixed number of owners.
    pub(crate) model_owners: Vec<(ModelId, usize)>,
    /// Ring parameters; gateways that share them agree on owners.
    pub(crate) ring: RingConfig,
    /// The configuration of each backend's circuit breaker.
    pub(crate) breaker: BreakerConfig,
    /// What one breaker covers: a backend, or a (backend, model) pair.
    pub(crate) breaker_scope: BreakerScope,
    /// How joins and weight changes enter the ring.
    pub(crate) staging: StagingConfig,
    /// Told of every transition of the backends' breakers.
    pub(crate) breaker_hook: Option<Hook>,
    /// What each backend's prefix cache holds, from its KV-cache events.
    #[cfg(feature = "kv-events")]
    pub(crate) kv_index: Option<crate::kv::KvIndex>,
    /// How backend health is scored and when a backend is ejected.
    pub(crate) health: HealthConfig,
    /// The response header residency is learned from, if any.
    pub(crate) residency_header: Option<ResidencyHeader>,
    /// What a response's outcome is read from.
    pub(crate) classifier: Classifier,
    /// Per-backend admission limits and shedding, if on.
    pub(crate) admission: Option<AdmissionConfig>,
    /// Where a call's latency stops for its breaker, health, latency
    /// estimate and adaptive limit.
    pub(crate) stop_point: StopPoint,
    /// Whether each request gets a routing receipt.
    pub(crate) receipts: bool,
}

/// The most pairs [`BreakerScope::BackendModel`] may track.
pub(crate) const MAX_PAIRS: usize = 1_000_000;

/// What one circuit breaker covers; set with
/// [`BalanceConfigBuilder::breaker_scope`](crate::balance::BalanceConfigBuilder::breaker_scope).
///
/// ```
/// use tower_model_balance::balance::{BalanceConfig, BreakerScope};
///
/// let config = BalanceConfig::builder()
///     .breaker_scope(BreakerScope::BackendModel { max_pairs: 10_000 })
///     .build()
///     .unwrap();
/// assert!(format!("{config:?}").contains("BackendModel { max_pairs: 10000 }"));
/// let zero = BreakerScope::BackendModel { max_pairs: 0 };
/// let err = BalanceConfig::builder().breaker_scope(zero).build().unwrap_err();
/// assert_eq!(err.field, "breaker_scope");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum BreakerScope {
    /// One breaker per backend: its failures, for any model, eject it for
    /// every model. The default.
    #[default]
    Backend,
    /// One breaker per (backend, model) pair: a backend failing for one
    /// model stays eligible for the others. At most `max_pairs` pairs
    /// (1 ..= 1 000 000) are tracked, least recently used evicted; an
    /// evicted pair starts over closed. Each tracked pair holds a breaker
    /// with the `breaker` policy: a few hundred bytes plus one byte per
    /// call of its window.
    ///
    /// Panic mode does not look at pair breakers: a model failing on every
    /// backend fails fast with `NoHealthyBackend` rather than being routed
    /// over all of them.
    BackendModel {
        /// The most (backend, model) pairs tracked at once.
        max_pairs: usize,
    },
}

/// A response header that tells the balancer what a backend holds
/// resident, read from every response (its headers, before the body).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResidencyHeader {
    /// The header lists the models resident on the backend after the
    /// request, comma-separated (e.g. the simulator's
    /// `x-sim-resident-models`): the server's own list, taken as
    /// [`BalancerHandle::report_probe`](crate::balance::BalancerHandle::report_probe)
    /// takes a probe's (listed: served; served before but not listed:
    /// evicted; still loading: kept). Names that are not valid model IDs
    /// are skipped.
    ResidentModels(HeaderName),
    /// The header is `true` when the request waited for its model to load
    /// (e.g. the simulator's `x-sim-cold-load`): either way the model is
    /// resident there now, and served.
    ColdLoad(HeaderName),
}

impl Default for BalanceConfig {
    fn default() -> Self {
        Self {
            owners: 2,
            min_owners: 1,
            load_factor: 1.25,
            owner_load: None,
            panic_threshold: 0.5,
            latency_decay: DEFAULT_LATENCY_DECAY,
            model_owners: Vec::new(),
            ring: RingConfig::default(),
            breaker: BreakerConfig::default(),
            breaker_scope: BreakerScope::Backend,
            staging: StagingConfig::default(),
            breaker_hook: None,
            #[cfg(feature = "kv-events")]
            kv_index: None,
            health: HealthConfig::default(),
            residency_header: None,
            classifier: Classifier::http(),
            admission: None,
            stop_point: StopPoint::FirstFrame,
            receipts: false,
        }
    }
}

// Read by the balancer, and all of them by `config`'s `to_toml`.
#[cfg_attr(not(feature = "config"), allow(dead_code))]
impl BalanceConfig {
    /// The most owners a model gets (`k`).
    pub(crate) fn owners(&self) -> usize {
        self.owners
    }

    /// The fewest owners a model gets.
    pub(crate) fn min_owners(&self) -> usize {
        self.min_owners
    }

    /// The bounded-load factor `c`.
    pub(crate) fn load_factor(&self) -> f64 {
        self.load_factor
    }

    /// The load one model's traffic puts on each of its owners, as a
    /// multiple of the mean load per backend: the value set with
    /// [`BalanceConfigBuilder::owner_load`](super::BalanceConfigBuilder::owner_load), else `load_factor`.
    pub(crate) fn owner_load(&self) -> f64 {
        self.owner_load.unwrap_or(self.load_factor)
    }

    /// The share of eligible backends below which the balancer panics.
    pub(crate) fn panic_threshold(&self) -> f64 {
        self.panic_threshold
    }

    /// The time constant of an idle backend's latency estimate.
    pub(crate) fn latency_decay(&self) -> Duration {
        self.latency_decay
    }

    /// The models given a fixed number of owners, with that number.
    pub(crate) fn model_owners(&self) -> &[(ModelId, usize)] {
        &self.model_owners
    }

    /// The ring parameters.
    pub(crate) fn ring(&self) -> &RingConfig {
        &self.ring
    }

    /// What one breaker covers (default [`BreakerScope::Backend`]).
    pub(crate) fn breaker_scope(&self) -> BreakerScope {
        self.breaker_scope
    }

    /// How ring changes are staged.
    pub(crate) fn staging(&self) -> &StagingConfig {
        &self.staging
    }

    /// How backend health is scored and when a backend is ejected.
    pub(crate) fn health(&self) -> &HealthConfig {
        &self.health
    }
}

/// How ring changes are staged: when backends join or change weight, their
/// ring points enter (or leave) a share at a time, a cooldown apart, so that
/// a topology change does not move most models at once and set off a storm
/// of cold loads.
///
/// | field | default | range |
/// | --- | --- | --- |
/// | `max_share` | 0.01 | above 0.0, up to 1.0 (1.0 turns staging off) |
/// | `cooldown` | 5 s | 0 ..= 1 h |
///
/// A step changes at most `ceil(max_share × points)` points, `points` being
/// those of the ring in force before it (at least one point), so about that
/// share of models changes owner per step. The defaults move about one
/// model in a hundred per step and give their cold loads five seconds
/// before the next: a tenth of the fleet joining at once lands in ten
/// steps, 45 s, each joiner taking a model or two per step (one load at a
/// time, 0.5–8.5 s each in the fleet simulation, `examples/simulate`),
/// which there halves the peak rate of cold loads against landing the
/// join at once (the sweep behind the defaults is in `docs/simulation.md`). Four
/// backends joining eight take 41 steps, 200 s. Removals are not staged (a
/// removed backend is not picked again at once), nor is the first backend
/// set, as the ring is empty then.
///
/// ```
/// use std::time::Duration;
/// use tower_model_balance::balance::{BalanceConfig, StagingConfig};
///
/// let staging = StagingConfig::new(0.2, Duration::from_secs(30)).unwrap();
/// let config = BalanceConfig::builder().staging(staging).build().unwrap();
/// assert_ne!(config, BalanceConfig::default());
/// assert_eq!(StagingConfig::new(0.0, Duration::ZERO).unwrap_err().field, "max_share");
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct StagingConfig {
    /// The most a step changes, as a share of the ring's points.
    pub(crate) max_share: f64,
    /// The least time between two steps.
    pub(crate) cooldown: Duration,
}

impl Default for StagingConfig {
    fn default() -> Self {
        Self {
            max_share: 0.01,
            cooldown: Duration::from_secs(5),
        }
    }
}

#[cfg_attr(not(feature = "config"), allow(dead_code))]
impl StagingConfig {
    /// Steps changing at most `max_share` of the ring's points each
    /// (above 0.0, up to 1.0; 1.0 lands every change at once), `cooldown`
    /// apart (up to 1 h).
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming `max_share` when it is not above 0.0 and
    /// at most 1.0, `cooldown` when it is over an hour.
    pub fn new(max_share: f64, cooldown: Duration) -> Result<Self, InvalidConfig> {
        if !(max_share > 0.0 && max_share <= 1.0) {
            return Err(InvalidConfig::new("max_share", "above 0.0, up to 1.0"));
        }
        if cooldown > Duration::from_secs(3600) {
            return Err(InvalidConfig::new("cooldown", "0 ..= 1 h"));
        }
        Ok(Self {
            max_share,
            cooldown,
        })
    }

    /// The most a step changes, as a share of the ring's points.
    pub(crate) fn max_share(&self) -> f64 {
        self.max_share
    }

    /// The least time between two steps.
    pub(crate) fn cooldown(&self) -> Duration {
        self.cooldown
    }
}
