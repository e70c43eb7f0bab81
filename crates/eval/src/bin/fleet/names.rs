//! The strategies' names: every one `--strategies` takes (each built by
//! `strategies.rs`), and what each scenario runs when it is not given.

/// Every strategy, by the name `--strategies` takes.
pub const NAMES: [&str; 7] = [
    "round_robin",
    "p2c",
    "consistent_hash",
    "chwbl",
    "model_aware",
    "model_aware_hedged",
    "model_aware_admission",
];

/// What runs when `--strategies` is not given.
pub const DEFAULT: [&str; 5] = [
    "round_robin",
    "p2c",
    "consistent_hash",
    "model_aware",
    "model_aware_hedged",
];

/// What the `overload` scenario runs when `--strategies` is not given:
/// model-aware with and without admission, and the baselines.
pub const OVERLOAD: [&str; 5] = [
    "round_robin",
    "p2c",
    "consistent_hash",
    "model_aware",
    "model_aware_admission",
];

/// What the `prefix` scenario runs when `--strategies` is not given:
/// KubeAI's `PrefixHash` (`chwbl`) among them.
pub const PREFIX: [&str; 5] = [
    "round_robin",
    "p2c",
    "consistent_hash",
    "chwbl",
    "model_aware",
];
