//! The balancer's validated configuration.

use crate::breaker::Policy;
use crate::error::InvalidConfig;
use crate::ring::RingConfig;
use crate::route::ModelId;

/// How the balancer routes.
///
/// | field | default | range |
/// | --- | --- | --- |
/// | `owners` (k, the most a model gets) | 2 | 1 ..= 64 |
/// | `min_owners` | 1 | 1 ..= `owners` |
/// | `load_factor` (c) | 1.25 | 1.0 ..= 100.0 |
/// | `panic_threshold` | 0.5 | 0.0 ..= 1.0 (0 turns panic mode off) |
/// | `model_owners` (per-model fixed `k`) | none | 1 ..= 64 each |
/// | `ring` | seed 0, 150 vnodes per unit of weight | see [`RingConfig`] |
/// | `breaker` | [`Policy::default`] | see [`Policy`] |
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BalanceConfig {
    /// The most owners (distinct backends of its ring walk) a model gets:
    /// `k`. Within `min_owners ..= owners`, a model gets as many as its
    /// share of recent traffic needs, `ceil(share × n / c)`.
    pub(crate) owners: usize,
    /// The fewest owners a model gets, however cold.
    pub(crate) min_owners: usize,
    /// Bounded-load factor `c`: an owner with
    /// `ceil(c × (total in-flight + 1) / n)` requests in flight is passed over for the next owner
    /// (Mirrokni, Thorup and Zadimoghaddam, 2016).
    pub(crate) load_factor: f64,
    /// Panic mode below this share of eligible backends.
    pub(crate) panic_threshold: f64,
    /// Models with a fixed number of owners.
    pub(crate) model_owners: Vec<(ModelId, usize)>,
    /// Ring parameters; gateways that share them agree on owners.
    pub(crate) ring: RingConfig,
    /// Policy of each backend's circuit breaker.
    pub(crate) breaker: Policy,
}

impl Default for BalanceConfig {
    fn default() -> Self {
        Self {
            owners: 2,
            min_owners: 1,
            load_factor: 1.25,
            panic_threshold: 0.5,
            model_owners: Vec::new(),
            ring: RingConfig::default(),
            breaker: Policy::default(),
        }
    }
}

impl BalanceConfig {
    /// The most owners a model gets (`k`).
    pub fn owners(&self) -> usize {
        self.owners
    }

    /// The fewest owners a model gets.
    pub fn min_owners(&self) -> usize {
        self.min_owners
    }

    /// The bounded-load factor `c`.
    pub fn load_factor(&self) -> f64 {
        self.load_factor
    }

    /// The share of eligible backends below which the balancer panics.
    pub fn panic_threshold(&self) -> f64 {
        self.panic_threshold
    }

    /// The models given a fixed number of owners, with that number.
    pub fn model_owners(&self) -> &[(ModelId, usize)] {
        &self.model_owners
    }

    /// The ring parameters.
    pub fn ring(&self) -> &RingConfig {
        &self.ring
    }

    /// The per-backend breaker policy.
    pub fn breaker(&self) -> &Policy {
        &self.breaker
    }

    /// A builder starting from the defaults.
    pub fn builder() -> BalanceConfigBuilder {
        BalanceConfigBuilder {
            config: Self::default(),
        }
    }
}

/// Builds a validated [`BalanceConfig`].
///
/// ```
/// use tower_model_balance::balance::BalanceConfig;
///
/// let config = BalanceConfig::builder().owners(3).build().unwrap();
/// assert_eq!(config.owners(), 3);
/// assert_eq!(BalanceConfig::builder().owners(0).build().unwrap_err().field, "owners");
/// ```
#[derive(Debug, Clone)]
pub struct BalanceConfigBuilder {
    config: BalanceConfig,
}

impl BalanceConfigBuilder {
    /// Sets `k`, the most owners a model gets (1 ..= 64; default 2).
    pub fn owners(mut self, k: usize) -> Self {
        self.config.owners = k;
        self
    }

    /// Sets the fewest owners a model gets (1 ..= `owners`; default 1).
    pub fn min_owners(mut self, k: usize) -> Self {
        self.config.min_owners = k;
        self
    }

    /// Sets the bounded-load factor `c` (1.0 ..= 100.0; default 1.25).
    pub fn load_factor(mut self, c: f64) -> Self {
        self.config.load_factor = c;
        self
    }

    /// Sets the panic threshold (0.0 ..= 1.0; default 0.5): when fewer
    /// than this share of the backends are eligible (breaker admitting),
    /// requests are routed over every backend, breakers bypassed, rather
    /// than piling onto the few left — Envoy's panic threshold. 0 turns
    /// panic mode off.
    pub fn panic_threshold(mut self, share: f64) -> Self {
        self.config.panic_threshold = share;
        self
    }

    /// Gives `model` exactly `k` owners (1 ..= 64), whatever its demand —
    /// e.g. a large model pinned to one backend, or a critical one always
    /// kept warm on three. A later call for the same model replaces the
    /// earlier one.
    pub fn model_owners(mut self, model: ModelId, k: usize) -> Self {
        self.config.model_owners.retain(|(m, _)| m != &model);
        self.config.model_owners.push((model, k));
        self
    }

    /// Sets the ring parameters.
    pub fn ring(mut self, ring: RingConfig) -> Self {
        self.config.ring = ring;
        self
    }

    /// Sets the per-backend breaker policy.
    pub fn breaker(mut self, policy: Policy) -> Self {
        self.config.breaker = policy;
        self
    }

    /// Validates and returns the config.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming `owners` when it is outside 1 ..= 64,
    /// `min_owners` when outside 1 ..= `owners`, `load_factor` when
    /// outside 1.0 ..= 100.0, `panic_threshold` when outside 0.0 ..= 1.0,
    /// `model_owners` when a model's `k` is outside 1 ..= 64.
    pub fn build(self) -> Result<BalanceConfig, InvalidConfig> {
        if !(1..=64).contains(&self.config.owners) {
            return Err(InvalidConfig::new("owners", "1 ..= 64"));
        }
        if !(1..=self.config.owners).contains(&self.config.min_owners) {
            return Err(InvalidConfig::new("min_owners", "1 ..= owners"));
        }
        if !(1.0..=100.0).contains(&self.config.load_factor) {
            return Err(InvalidConfig::new("load_factor", "1.0 ..= 100.0"));
        }
        if !(0.0..=1.0).contains(&self.config.panic_threshold) {
            return Err(InvalidConfig::new("panic_threshold", "0.0 ..= 1.0"));
        }
        if self
            .config
            .model_owners
            .iter()
            .any(|&(_, k)| !(1..=64).contains(&k))
        {
            return Err(InvalidConfig::new(
                "model_owners",
                "1 ..= 64 owners per model",
            ));
        }
        Ok(self.config)
    }
}
