//! The request streams the `balance` rows replay: model IDs drawn
//! Zipf(1.1) in one fixed, seeded sequence, and the prefix workload's
//! keys.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tower_model_balance::route::{ModelId, PrefixKey, RouteInfo};

use crate::ready::request;
use crate::Req;

/// Conversations in the prefix workload.
const SESSIONS: usize = 4096;
/// The one model of the prefix workload.
const LLM: &str = "llama-3-8b";
/// Skew of model popularity (the fleet workload in DESIGN.md).
const ZIPF: f64 = 1.1;
/// Length of the precomputed model sequence each sample replays.
const SEQUENCE: usize = 1 << 16;
/// The request stream every row replays.
#[derive(Debug)]
pub struct Workload {
    models: Vec<String>,
    sequence: Vec<u16>,
    source: Source,
}

/// Where a request's route is.
#[derive(Debug)]
enum Source {
    /// Its `x-model-id` header.
    Headers,
    /// A `RouteInfo` extension with the model only, as
    /// `ModelFromBodyLayer` leaves one.
    Extension,
    /// A `RouteInfo` extension with a prefix key: one key per prompt
    /// prefix, all of [`LLM`].
    Prefixed(Vec<PrefixKey>),
}

impl Workload {
    /// `count` model IDs and a fixed Zipf-distributed sequence over them.
    pub fn new(count: usize) -> Self {
        let models = (0..count).map(|i| format!("model-{i:04}")).collect();
        let mut cdf: Vec<f64> = (1..=count).map(|k| (k as f64).powf(-ZIPF)).collect();
        for i in 1..cdf.len() {
            cdf[i] += cdf[i - 1];
        }
        let total = cdf[count - 1];
        let mut rng = SmallRng::seed_from_u64(1);
        let sequence = (0..SEQUENCE)
            .map(|_| {
                let u = rng.gen::<f64>() * total;
                cdf.partition_point(|&c| c < u).min(count - 1) as u16
            })
            .collect();
        Self {
            models,
            sequence,
            source: Source::Headers,
        }
    }

    /// The same requests, each with its route in a `RouteInfo` extension.
    pub fn with_routes(count: usize) -> Self {
        Self {
            source: Source::Extension,
            ..Self::new(count)
        }
    }

    /// Requests of [`LLM`] with `count` prompt prefixes in the same Zipf
    /// sequence, each a turn of one of [`SESSIONS`] conversations.
    pub fn prefixed(count: usize) -> Self {
        let model = ModelId::new(LLM).expect("a valid ID");
        let prefixes = (0..count)
            .map(|i| {
                let prompt = format!("system\nYou are assistant {i:04} of ACME.\n");
                PrefixKey::from_prompt(&model, prompt.as_bytes())
            })
            .collect();
        Self {
            source: Source::Prefixed(prefixes),
            ..Self::new(count)
        }
    }

    /// Replaces `out` with the `len` requests starting at position `from`.
    pub fn fill(&self, out: &mut Vec<Req>, from: u64, len: usize) {
        out.clear();
        out.extend((0..len).map(|i| {
            let at = (from as usize + i) % self.sequence.len();
            let index = usize::from(self.sequence[at]);
            match &self.source {
                Source::Headers => request(&self.models[index], "inference"),
                Source::Extension => {
                    let model = &self.models[index];
                    let route = RouteInfo::new(ModelId::new(model).expect("a valid ID"));
                    let mut req = request(model, "inference");
                    req.extensions_mut().insert(route);
                    req
                }
                Source::Prefixed(keys) => {
                    let session = (at % SESSIONS).to_le_bytes();
                    let key = keys[index].with_session(&session);
                    let mut route = RouteInfo::new(ModelId::new(LLM).expect("a valid ID"));
                    route.prefix = Some(key);
                    let mut req = request(LLM, "inference");
                    req.extensions_mut().insert(route);
                    req
                }
            }
        }));
    }
}
