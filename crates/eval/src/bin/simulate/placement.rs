//! Where models sit: the ring's first owners (the fleet's starting
//! memory, the models a change moves, how evenly the ring spreads keys)
//! and the oracle's placement, which bounds the warm-hit rate.

use tower_model_balance::ring::{Ring, RingConfig};

use crate::config::Config;
use crate::strategy::Names;
use crate::workload::Workload;

/// The crate's ring over the first `count` backends, if it can be built.
fn ring(config: &Config, names: &Names, count: usize) -> Option<Ring> {
    let ring_config = RingConfig::new(0, config.vnodes).ok()?;
    let members = names.backends[..count].iter().map(|id| (id.clone(), 1));
    Ring::build(&ring_config, members).ok()
}

/// The models each of the first `initial` backends holds when a run
/// starts: a fleet that has been serving for a while under affinity, each
/// backend holding the most popular of the models whose first ring owner
/// it is (as many as fit). Without it every strategy would start with a
/// storm of first loads that takes over a million requests to settle
/// (the rarest models come up once in that many).
pub fn preload(config: &Config, names: &Names, initial: usize) -> Vec<Vec<u32>> {
    let mut held = vec![Vec::new(); initial];
    let Some(ring) = ring(config, names, initial) else {
        return held;
    };
    // Model IDs are in popularity order.
    for (m, &key) in names.hashes.iter().enumerate() {
        if let Some(b) = ring.primary(key) {
            if held[b].len() < config.model_slots {
                held[b].push(m as u32);
            }
        }
    }
    held
}

/// Models whose first owner on the ring differs after `joins` backends
/// join `n` (0 if a ring cannot be built).
pub fn models_moved(config: &Config, names: &Names, n: usize, joins: usize) -> usize {
    let (Some(before), Some(after)) = (ring(config, names, n), ring(config, names, n + joins))
    else {
        return 0;
    };
    names
        .hashes
        .iter()
        .filter(|&&key| {
            let owner = |r: &Ring| r.primary(key).map(|i| r.member(i).clone());
            owner(&before) != owner(&after)
        })
        .count()
}

/// How evenly the ring spreads the key space: the largest share of
/// 2^20 evenly spread keys one backend is first owner of, over the mean
/// share (1.0: perfectly even). Models are too few (10 a backend by
/// default) to tell the ring's evenness from their own spread.
pub fn ring_balance(config: &Config, names: &Names) -> f64 {
    use tower_model_balance::ring::{Ring, RingConfig};
    const KEYS: u64 = 1 << 20;
    let ring_config = RingConfig::new(0, config.vnodes).expect("vnodes ≥ 1");
    let members = names.backends[..config.backends]
        .iter()
        .map(|id| (id.clone(), 1));
    let Ok(ring) = Ring::build(&ring_config, members) else {
        return 0.0;
    };
    let mut owned = vec![0u32; config.backends];
    let step = u64::MAX / KEYS;
    for i in 0..KEYS {
        if let Some(b) = ring.primary(i * step) {
            owned[b] += 1;
        }
    }
    let max = owned.iter().copied().max().unwrap_or(0);
    f64::from(max) * config.backends as f64 / KEYS as f64
}

/// An upper bound on the warm-hit rate: a placement that knows each
/// model's popularity gives the most popular models, in order, as many
/// replicas as their share of the inference work needs to keep every
/// backend at the mean load (at least one), until the fleet's model slots
/// run out; every request for a placed model is warm, every other cold.
pub fn oracle_warm_hit(config: &Config, workload: &Workload) -> f64 {
    let n = config.backends;
    let work: Vec<f64> = (0..workload.models.len())
        .map(|i| workload.zipf.share(i) * workload.models[i].infer as f64)
        .collect();
    let total_work: f64 = work.iter().sum();
    let mut slots_left = (n * config.model_slots) as f64;
    let mut warm = 0.0;
    for (i, w) in work.iter().enumerate() {
        let replicas = (w / total_work * n as f64).ceil().max(1.0);
        if replicas > slots_left {
            break;
        }
        slots_left -= replicas;
        warm += workload.zipf.share(i);
    }
    warm
}
