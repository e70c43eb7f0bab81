//! The workload: open-loop Poisson arrivals, Zipf(1.1) model popularity,
//! 10% updates, all drawn from the seed.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tower_model_balance_sim::InferenceTimes;

/// How many models the workload asks for (`model-00` … `model-31`).
pub const MODELS: usize = 32;
/// The exponent of the models' Zipf popularity.
pub const ZIPF_EXPONENT: f64 = 1.1;
/// The share of requests that are updates (not inference).
pub const UPDATE_SHARE: f64 = 0.1;
/// Offered load, as a fraction of the fleet's warm capacity, unless
/// `--load` says otherwise.
pub const DEFAULT_LOAD: f64 = 0.3;

/// One planned request.
#[derive(Debug, Clone)]
pub struct Planned {
    /// Send time after the start of the run.
    pub at: Duration,
    /// The model it names.
    pub model: String,
    /// An update (P2C by load), not an inference request.
    pub update: bool,
    /// Sent with `x-urgency: critical`.
    pub critical: bool,
}

/// The name of the model of popularity `rank` (0 the most popular).
pub fn model_name(rank: usize) -> String {
    format!("model-{rank:02}")
}

/// Popularity of each model by rank, summing to 1.
fn popularity() -> Vec<f64> {
    let weights: Vec<f64> = (1..=MODELS)
        .map(|r| (r as f64).powf(-ZIPF_EXPONENT))
        .collect();
    let total: f64 = weights.iter().sum();
    weights.into_iter().map(|w| w / total).collect()
}

/// Requests per second at the target utilization: backends × slots ÷
/// popularity-weighted mean inference time, times the utilization.
pub fn arrival_rate(backends: usize, slots: usize, times: &InferenceTimes, load: f64) -> f64 {
    let mean: f64 = popularity()
        .iter()
        .enumerate()
        .map(|(rank, p)| p * times.of(&model_name(rank)).as_secs_f64())
        .sum();
    load * (backends * slots) as f64 / mean
}

/// `requests` arrivals at `rate` per second; a `critical_share` of them
/// `Critical`, drawn from a stream of their own (so the arrivals, models and
/// updates are those of the same seed without it).
pub fn plan(requests: usize, rate: f64, seed: u64, critical_share: f64) -> Vec<Planned> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut urgency = SmallRng::seed_from_u64(seed ^ 0xc217_1ca1);
    let cdf: Vec<f64> = popularity()
        .iter()
        .scan(0.0, |acc, p| {
            *acc += p;
            Some(*acc)
        })
        .collect();
    let mut at = 0.0;
    (0..requests)
        .map(|_| {
            let u: f64 = rng.gen();
            at += -(1.0 - u).ln() / rate;
            let draw: f64 = rng.gen();
            let rank = cdf.partition_point(|&c| c < draw).min(MODELS - 1);
            Planned {
                at: Duration::from_secs_f64(at),
                model: model_name(rank),
                update: rng.gen_bool(UPDATE_SHARE),
                critical: urgency.gen_bool(critical_share),
            }
        })
        .collect()
}
