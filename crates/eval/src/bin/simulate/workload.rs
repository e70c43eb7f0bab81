//! The workload: models with sizes, Zipf popularity and open-loop Poisson
//! arrivals at a target share of the fleet's warm capacity (at a full
//! batch, for servers that batch).

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::batching;
use crate::config::Config;
use crate::queue::Nanos;
use crate::zipf::Zipf;

const MS: f64 = 1e6;

/// Model sizes in GB and the share of models of each size: adapters and
/// small models mostly, a few 8 and 16 GB ones.
const SIZES: [(u32, f64); 4] = [(1, 0.5), (4, 0.3), (8, 0.15), (16, 0.05)];
/// An update's service time: it needs no resident model.
pub const UPDATE_NS: Nanos = 10_000_000;

/// One model's size and times.
#[derive(Debug, Clone, Copy)]
pub struct Model {
    pub size_gb: u32,
    /// Inference time on a backend holding it resident.
    pub infer: Nanos,
    /// Time to load its weights into GPU memory (a cold load).
    pub load: Nanos,
}

impl Model {
    /// A model of `size_gb` whose inference takes `inference_scale` ×
    /// the default's.
    fn of_size(size_gb: u32, inference_scale: f64) -> Self {
        let gb = f64::from(size_gb);
        Self {
            size_gb,
            // 100 ms + 10 ms per GB: 110 ms for an adapter, 260 ms at
            // 16 GB (a short completion, batched on a shared GPU: the
            // size adds less than its share of memory bandwidth); times
            // the scale (10 in `llm-batch`: completions of 1.1 to 2.6 s).
            infer: ((100.0 + 10.0 * gb) * inference_scale * MS) as Nanos,
            // 0.5 s + 0.5 s per GB (2 GB/s from host memory or local
            // disk): 1 s for an adapter, 8.5 s at 16 GB — 9× to 33× an
            // inference.
            load: ((500.0 + 500.0 * gb) * MS) as Nanos,
        }
    }
}

/// What a request asks.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    /// The model's rank in popularity (0: the most popular).
    pub model: u32,
    pub update: bool,
}

/// The models, their popularity and the arrival process.
#[derive(Debug, Clone)]
pub struct Workload {
    pub models: Vec<Model>,
    pub zipf: Zipf,
    pub update_share: f64,
    /// Mean time between arrivals.
    pub gap_ns: f64,
    /// Requests per second at the target utilization.
    pub rate: f64,
}

impl Workload {
    pub fn new(config: &Config) -> Self {
        let mut rng = SmallRng::seed_from_u64(config.seed ^ 0x6d6f_6465_6c73);
        let models: Vec<Model> = (0..config.models)
            .map(|_| {
                let mut u: f64 = rng.gen();
                let size = SIZES
                    .iter()
                    .find(|(_, share)| {
                        u -= share;
                        u < 0.0
                    })
                    .map_or(SIZES[SIZES.len() - 1].0, |s| s.0);
                Model::of_size(size, config.inference_scale)
            })
            .collect();
        let zipf = Zipf::new(config.models, config.zipf);
        let mut workload = Self {
            models,
            zipf,
            update_share: config.update_share,
            gap_ns: 0.0,
            rate: 0.0,
        };
        let capacity =
            workload.warm_capacity(config.backends, config.serving_slots, config.batch_slowdown);
        workload.rate = config.utilization * capacity;
        workload.gap_ns = 1e9 / workload.rate;
        workload
    }

    /// Mean service time of a request served warm, in seconds,
    /// popularity-weighted, an inference slowed by `slowdown` (its time
    /// over its time alone; updates are not batched).
    pub fn mean_warm_service(&self, slowdown: f64) -> f64 {
        let infer: f64 = (0..self.models.len())
            .map(|i| self.zipf.share(i) * self.models[i].infer as f64)
            .sum();
        ((1.0 - self.update_share) * infer * slowdown + self.update_share * UPDATE_NS as f64) / 1e9
    }

    /// Requests per second the fleet serves with every model warm and
    /// every serving slot busy: at a full batch when the servers batch
    /// with `batch_slowdown` (see [`crate::batching`]).
    pub fn warm_capacity(&self, backends: usize, slots: usize, batch_slowdown: f64) -> f64 {
        let full = batching::slowdown_factor(slots.saturating_sub(1) as u32, batch_slowdown);
        (backends * slots) as f64 / self.mean_warm_service(full)
    }

    /// The next request and the time until it arrives.
    pub fn next(&self, rng: &mut SmallRng) -> (Nanos, Request) {
        let u: f64 = rng.gen();
        let gap = (-(1.0 - u).ln() * self.gap_ns) as Nanos;
        let update = rng.gen_bool(self.update_share);
        let model = self.zipf.sample(rng) as u32;
        (gap.max(1), Request { model, update })
    }

    /// Virtual time `requests` arrivals take on average.
    pub fn span(&self, requests: usize) -> Nanos {
        (requests as f64 * self.gap_ns) as Nanos
    }
}
