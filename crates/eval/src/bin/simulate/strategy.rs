//! The routing strategies compared. Each decides with the crate's own code
//! where it has it: the ring ([`Ring`]) for the hashing strategies, the
//! full [`ModelBalancer`] (its pick API) for `model_aware`, and the same
//! balancer's power-of-two-choices path for `p2c`.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng as _, RngCore, SeedableRng};
use tokio::sync::watch;
use tokio::time::Instant;
use tower_model_balance::backend::{Backend, BackendId, BackendMeta};
use tower_model_balance::balance::{
    BalanceConfig, BalancerHandle, Guard, ModelBalancer, StagingConfig,
};
use tower_model_balance::breaker::BreakerConfig;
use tower_model_balance::classify::Outcome;
use tower_model_balance::discover::Watch;
use tower_model_balance::health::probe::ProbeReport;
use tower_model_balance::ring::{Ring, RingConfig};
use tower_model_balance::route::{ModelId, RequestKind, RouteInfo};

use crate::config::Config;
use crate::queue::Nanos;
use crate::workload::Request;

/// What a strategy keeps of one request until it finishes.
pub enum Token {
    Plain,
    Guard(Guard),
}

/// The fleet as the client sees it: IDs, model names and in-flight counts
/// (requests sent and not yet answered), all indexed by backend.
pub struct View<'a> {
    pub in_flight: &'a [u32],
    pub total_in_flight: u64,
}

/// One routing strategy.
pub trait Router {
    /// The backend for `req` at `now`; `None` if none will take it.
    fn pick(&mut self, req: Request, now: Nanos, view: &View<'_>) -> Option<(u32, Token)>;
    /// The request's answer at `now`.
    fn finish(&mut self, token: Token, ok: bool, now: Nanos) {
        let _ = (token, ok, now);
    }
    /// The backends in the fleet now (joins and leaves).
    fn set_members(&mut self, members: &[u32]);
    /// A probe's answer from `backend`: ready or not, and the models it
    /// holds loaded (a KServe v2 repository index).
    fn probe(&mut self, backend: u32, ready: bool, loaded: &mut dyn Iterator<Item = u32>) {
        let _ = (backend, ready, loaded);
    }
}

/// Names, IDs and hashes shared by the strategies of one run.
pub struct Names {
    pub backends: Vec<BackendId>,
    pub models: Vec<ModelId>,
    pub hashes: Vec<u64>,
}

impl Names {
    /// `backends` IDs (every backend a run may have, joiners included) and
    /// `models` model IDs.
    pub fn new(backends: usize, models: usize) -> Self {
        let backends = (0..backends)
            .map(|i| BackendId::new(&format!("gpu-{i:05}")).expect("a short ASCII ID"))
            .collect();
        let models: Vec<ModelId> = (0..models)
            .map(|i| ModelId::new(&format!("model-{i:06}")).expect("a short ASCII ID"))
            .collect();
        let hashes = models.iter().map(ModelId::hash64).collect();
        Self {
            backends,
            models,
            hashes,
        }
    }
}

/// Builds the named strategy over `members`.
pub fn build<'a>(
    name: &str,
    config: &Config,
    names: &'a Names,
    members: &[u32],
    preload: &[Vec<u32>],
    start: Instant,
    staged: bool,
) -> Box<dyn Router + 'a> {
    let seed = config.seed;
    match name {
        "round_robin" => Box::new(RoundRobin {
            members: members.to_vec(),
            next: 0,
        }),
        "random" => Box::new(Random {
            members: members.to_vec(),
            rng: SmallRng::seed_from_u64(seed ^ 0x7261_6e64),
        }),
        "consistent_hash" | "bounded_load" => {
            let mut hashing = Hashing {
                names,
                ring_config: RingConfig::new(0, config.vnodes).expect("vnodes ≥ 1"),
                ring: None,
                members: Vec::new(),
                bound: (name == "bounded_load").then_some(config.load_factor),
            };
            hashing.set_members(members);
            Box::new(hashing)
        }
        "p2c" => Box::new(Balanced::new(
            config, names, members, preload, start, true, staged,
        )),
        _ => Box::new(Balanced::new(
            config, names, members, preload, start, false, staged,
        )),
    }
}

// === impl RoundRobin ===

struct RoundRobin {
    members: Vec<u32>,
    next: usize,
}

impl Router for RoundRobin {
    fn pick(&mut self, _: Request, _: Nanos, _: &View<'_>) -> Option<(u32, Token)> {
        let b = *self.members.get(self.next % self.members.len().max(1))?;
        self.next = self.next.wrapping_add(1);
        Some((b, Token::Plain))
    }

    fn set_members(&mut self, members: &[u32]) {
        self.members = members.to_vec();
    }
}

// === impl Random ===

struct Random {
    members: Vec<u32>,
    rng: SmallRng,
}

impl Router for Random {
    fn pick(&mut self, _: Request, _: Nanos, _: &View<'_>) -> Option<(u32, Token)> {
        if self.members.is_empty() {
            return None;
        }
        let i = self.rng.gen_range(0..self.members.len());
        Some((self.members[i], Token::Plain))
    }

    fn set_members(&mut self, members: &[u32]) {
        self.members = members.to_vec();
    }
}

// === impl Hashing ===

/// Plain consistent hashing (the model's first owner on the crate's ring)
/// or, with `bound`, consistent hashing with bounded load: the first
/// backend of the model's ring walk with fewer than
/// `ceil(c × (total in-flight + 1) / n)` requests in flight (Mirrokni,
/// Thorup and Zadimoghaddam, 2016).
struct Hashing<'a> {
    names: &'a Names,
    ring_config: RingConfig,
    ring: Option<Ring>,
    /// Ring member index → backend.
    members: Vec<u32>,
    bound: Option<f64>,
}

impl Router for Hashing<'_> {
    fn pick(&mut self, req: Request, _: Nanos, view: &View<'_>) -> Option<(u32, Token)> {
        let ring = self.ring.as_ref()?;
        let key = self.names.hashes[req.model as usize];
        let primary = self.members[ring.primary(key)?];
        let Some(c) = self.bound else {
            return Some((primary, Token::Plain));
        };
        let n = self.members.len() as f64;
        let cap = (c * (view.total_in_flight + 1) as f64 / n).ceil() as u32;
        let chosen = ring
            .walk(key)
            .map(|i| self.members[i])
            .find(|&b| view.in_flight[b as usize] < cap)
            .unwrap_or(primary);
        Some((chosen, Token::Plain))
    }

    fn set_members(&mut self, members: &[u32]) {
        self.members = members.to_vec();
        let ids = members
            .iter()
            .map(|&b| (self.names.backends[b as usize].clone(), 1));
        self.ring = Ring::build(&self.ring_config, ids).ok();
    }
}

// === impl Balanced ===

/// A deterministic RNG for the balancer's P2C sampling.
#[derive(Clone)]
struct SimRng(SmallRng);

impl tower::util::rng::Rng for SimRng {
    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
}

/// The crate's [`ModelBalancer`], driven through its pick API: inference
/// by model (`model_aware`), or every request as an update, which the
/// balancer spreads by power of two choices on `(in-flight + 1) × latency
/// EWMA / health` over all eligible backends (`p2c`).
struct Balanced<'a> {
    names: &'a Names,
    balancer: ModelBalancer<u32, SimRng>,
    handle: BalancerHandle,
    sender: watch::Sender<Vec<Backend<u32>>>,
    model_slots: usize,
    all_updates: bool,
    routes: Vec<RouteInfo>,
    start: Instant,
}

impl<'a> Balanced<'a> {
    fn new(
        config: &Config,
        names: &'a Names,
        members: &[u32],
        preload: &[Vec<u32>],
        start: Instant,
        all_updates: bool,
        staged: bool,
    ) -> Self {
        let balance = balance_config(config, staged);
        let mut backends = backends(names, members, config.model_slots);
        // The balancer is told what the fleet holds at start, as discovery
        // metadata would.
        for (backend, models) in backends.iter_mut().zip(preload) {
            let resident = models.iter().map(|&m| names.models[m as usize].clone());
            backend.meta = backend.meta.clone().with_resident_models(resident);
        }
        let (sender, receiver) = watch::channel(backends);
        let rng = SimRng(SmallRng::seed_from_u64(config.seed ^ 0x7032_6321));
        let balancer = ModelBalancer::from_rng(Watch::new(receiver), balance, rng)
            .expect("the balancer is built inside the runtime");
        let routes = names
            .models
            .iter()
            .map(|m| RouteInfo::new(m.clone()))
            .collect();
        Self {
            names,
            handle: balancer.handle(),
            balancer,
            sender,
            model_slots: config.model_slots,
            all_updates,
            routes,
            start,
        }
    }
}

/// The model-aware balancer's config for a run: the crate's defaults but
/// for the flags (`k`, `c`, vnodes, staging) and the breakers' jitter,
/// which is off: its seed is random per process by design (gateway
/// replicas must not probe a backend in step), and with it on two runs of
/// one seed would differ in when breakers half-open.
pub fn balance_config(config: &Config, staged: bool) -> BalanceConfig {
    let staging = match staged {
        true => StagingConfig::new(
            config.staging_step,
            Duration::from_secs_f64(config.staging_cooldown),
        ),
        false => StagingConfig::new(1.0, Duration::ZERO),
    };
    let breaker = BreakerConfig::builder()
        .jitter(false)
        .build()
        .expect("the default policy with jitter off");
    let builder = BalanceConfig::builder()
        .breaker(breaker)
        .owners(config.owners)
        .min_owners(config.min_owners)
        .load_factor(config.load_factor);
    let builder = match config.owner_load {
        Some(load) => builder.owner_load(load),
        None => builder,
    };
    builder
        .ring(RingConfig::new(0, config.vnodes).expect("vnodes ≥ 1"))
        .staging(staging.expect("flags are range-checked"))
        .build()
        .expect("flags are range-checked")
}

/// The backend set discovery announces. The balancer is told each
/// backend's model slots, up to the most it takes
/// ([`BackendMeta::MAX_MODEL_SLOTS`]).
fn backends(names: &Names, members: &[u32], model_slots: usize) -> Vec<Backend<u32>> {
    let model_slots = model_slots.clamp(1, BackendMeta::MAX_MODEL_SLOTS);
    members
        .iter()
        .map(|&b| {
            let meta = BackendMeta::new(names.backends[b as usize].clone())
                .with_model_slots(model_slots)
                .expect("clamped to the accepted range");
            Backend::with_meta(meta, b)
        })
        .collect()
}

impl Router for Balanced<'_> {
    fn pick(&mut self, req: Request, now: Nanos, _: &View<'_>) -> Option<(u32, Token)> {
        let route = &mut self.routes[req.model as usize];
        let kind = match req.update || self.all_updates {
            true => RequestKind::Update,
            false => RequestKind::Inference,
        };
        route.kind = kind;
        let at = self.start + Duration::from_nanos(now);
        let picked = self.balancer.pick_at(route, at).ok()?;
        Some((picked.endpoint, Token::Guard(picked.guard)))
    }

    fn finish(&mut self, token: Token, ok: bool, now: Nanos) {
        if let Token::Guard(guard) = token {
            let outcome = if ok {
                Outcome::Success
            } else {
                Outcome::Failure
            };
            guard.finish_at(outcome, self.start + Duration::from_nanos(now));
        }
    }

    fn set_members(&mut self, members: &[u32]) {
        let set = backends(self.names, members, self.model_slots);
        // The balancer's discovery task takes the new set on its next turn.
        self.sender.send_replace(set);
    }

    fn probe(&mut self, backend: u32, ready: bool, loaded: &mut dyn Iterator<Item = u32>) {
        let models = loaded
            .map(|m| self.names.models[m as usize].clone())
            .collect();
        let mut report = ProbeReport::default();
        report.ready = Some(ready);
        report.resident_models = Some(models);
        let id = &self.names.backends[backend as usize];
        self.handle.report_probe(id, Ok(&report));
    }
}
