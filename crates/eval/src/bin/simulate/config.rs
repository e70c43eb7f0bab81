//! One run's settings: the fleet, the workload and the model-aware
//! balancer's, with their defaults and each scenario's preset; the
//! strategies' names.

use std::path::PathBuf;

use crate::scenarios::Scenario;

/// The strategies a run compares (`strategy.rs`), by name, in table order.
pub const NAMES: [&str; 6] = [
    "round_robin",
    "random",
    "p2c",
    "consistent_hash",
    "bounded_load",
    "model_aware",
];

/// One run's parameters: the fleet, the workload and the model-aware
/// balancer's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// The fleet this config is the preset of (the flags on top).
    pub scenario: Scenario,
    pub backends: usize,
    pub models: usize,
    /// Requests per strategy, after the warm-up.
    pub requests: usize,
    pub seed: u64,
    pub zipf: f64,
    /// Arrival rate as a share of the fleet's warm capacity.
    pub utilization: f64,
    pub update_share: f64,
    /// Requests one backend serves at once (a queue beyond).
    pub serving_slots: usize,
    /// Inference times over the default scenario's (a model's time alone
    /// on its backend).
    pub inference_scale: f64,
    /// How much each request in service on a backend slows the others,
    /// as a share of their time alone (0: no batching; see
    /// [`crate::batching`]).
    pub batch_slowdown: f64,
    /// Models one backend holds in GPU memory.
    pub model_slots: usize,
    /// Virtual nodes per backend (the ring's).
    pub vnodes: u32,
    /// The most owners a model gets (`k`).
    pub owners: usize,
    /// The fewest owners a model gets, however cold.
    pub min_owners: usize,
    /// The bounded-load factor `c`.
    pub load_factor: f64,
    /// The load one model puts on each of its owners, over the mean per
    /// backend (`BalanceConfigBuilder::owner_load`); `None`: `c`.
    pub owner_load: Option<f64>,
    /// Staged ring changes: the most of the ring's points one step moves.
    pub staging_step: f64,
    /// Seconds between two staging steps.
    pub staging_cooldown: f64,
    pub json: bool,
    pub svg: Option<PathBuf>,
    pub sweep: bool,
    /// Run the membership-change scenarios.
    pub churn: bool,
    /// Strategies to run, in table order.
    pub strategies: Vec<&'static str>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            scenario: Scenario::Default,
            backends: 1000,
            models: 10_000,
            requests: 1_000_000,
            seed: 1,
            zipf: 1.1,
            utilization: 0.5,
            update_share: 0.1,
            serving_slots: 4,
            inference_scale: 1.0,
            batch_slowdown: 0.0,
            model_slots: 16,
            vnodes: 150,
            owners: 1024,
            min_owners: 1,
            load_factor: 1.25,
            owner_load: None,
            staging_step: 0.01,
            staging_cooldown: 5.0,
            json: false,
            svg: None,
            sweep: false,
            churn: true,
            strategies: NAMES.to_vec(),
        }
    }
}

impl Config {
    /// `scenario`'s settings, before the command line's flags.
    pub fn preset(scenario: Scenario) -> Self {
        let default = Config::default();
        match scenario {
            Scenario::Default => default,
            Scenario::LlmBatch => Config {
                scenario,
                serving_slots: 32,
                inference_scale: 10.0,
                batch_slowdown: 0.03,
                utilization: 0.75,
                load_factor: 1.15,
                owner_load: Some(0.75),
                ..default
            },
        }
    }
}
