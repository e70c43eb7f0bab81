//! The routing snapshot: ring plus per-backend state, swapped atomically.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::time::Instant;

use super::clock::Now;
use super::config::BreakerHook;
use super::cost::{cost, LatencyEwma};
use super::demand::Work;
use super::health::BackendHealth;
use super::placement::Placement;
use super::residency::Residency;
use super::scoped::{BreakerScope, Scoped};
use super::traffic::{FleetTraffic, Traffic};
use super::{BalanceConfig, Classification, ResidencyHeader};
use crate::backend::BackendId;
use crate::breaker::{Breaker, OnTransition, Policy, Ticket, Transition};
use crate::classify::Outcome;
use crate::health::HealthPolicy;
use crate::ring::Ring;

/// State shared by every backend of one balancer.
#[derive(Debug)]
pub(crate) struct Fleet {
    /// Requests picked by branch and finished, over every backend.
    pub(crate) traffic: FleetTraffic,
    /// Backends whose breaker is open or half-open.
    pub(crate) not_closed: Arc<AtomicUsize>,
    /// Origin of the millisecond stamps in residency tables.
    pub(crate) base: Instant,
    /// The (backend, model) pair breakers, in `BackendModel` scope.
    pub(crate) scoped: Option<Scoped>,
    /// The next backend state's [`BackendState::uid`].
    next_uid: AtomicU64,
    /// Inserts discovery made that were ignored (duplicate ID, ring point
    /// limit).
    pub(crate) ignored: AtomicU64,
    /// Told of the backend breakers' transitions.
    pub(crate) breaker_hook: Option<BreakerHook>,
    /// How health is scored.
    pub(crate) health: HealthPolicy,
    /// Time constant of an idle backend's latency estimate.
    pub(crate) latency_decay: std::time::Duration,
    /// Backends ejected by health at the last evaluation.
    pub(crate) ejected: AtomicUsize,
    /// Backends that asked to be ejected at the last evaluation and that
    /// the ejection cap kept in: unhealthy for the panic threshold.
    pub(crate) held: AtomicUsize,
    /// Backend states marked removed and not yet dropped (some may be in
    /// no table any more): with `not_closed` and `ejected`, a bound on the
    /// backends of a table that are not eligible.
    pub(crate) removed: AtomicUsize,
    /// The response header residency is learned from.
    pub(crate) residency_header: Option<ResidencyHeader>,
    /// What a response's outcome is read from.
    pub(crate) classification: Classification,
    /// On-demand placement, once enabled.
    pub(crate) placement: std::sync::OnceLock<Arc<Placement>>,
    /// Latency of each model's warm requests against the mean: its work.
    pub(crate) work: Work,
}

impl Fleet {
    /// A fleet with one breaker per backend.
    pub(crate) fn new() -> Self {
        Self {
            traffic: FleetTraffic::default(),
            not_closed: Arc::default(),
            base: Instant::now(),
            scoped: None,
            next_uid: AtomicU64::new(0),
            ignored: AtomicU64::new(0),
            breaker_hook: None,
            health: HealthPolicy::default(),
            latency_decay: super::config::DEFAULT_LATENCY_DECAY,
            ejected: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            removed: AtomicUsize::new(0),
            residency_header: None,
            classification: Classification::HttpStatus,
            placement: std::sync::OnceLock::new(),
            work: Work::new(),
        }
    }

    /// A fleet with the breakers `config` scopes.
    pub(crate) fn for_config(config: &BalanceConfig) -> Self {
        let scoped = match config.breaker_scope {
            BreakerScope::Backend => None,
            BreakerScope::BackendModel { max_pairs } => {
                Some(Scoped::new(config.breaker.clone(), max_pairs))
            }
        };
        Self {
            scoped,
            breaker_hook: config.breaker_hook.clone(),
            health: config.health.clone(),
            latency_decay: config.latency_decay,
            residency_header: config.residency_header.clone(),
            classification: config.classification,
            ..Self::new()
        }
    }

    /// Milliseconds from the fleet's base to `now`.
    pub(crate) fn millis(&self, now: Instant) -> u64 {
        // Not `as_millis`: its u128 arithmetic shows on the pick path.
        let since = now.saturating_duration_since(self.base);
        since
            .as_secs()
            .saturating_mul(1_000)
            .saturating_add(u64::from(since.subsec_millis()))
    }
}

/// The fleet's breaker hook, told `id` with each transition.
fn hook(id: &BackendId, fleet: &Fleet) -> Option<Box<dyn OnTransition>> {
    let BreakerHook(hook) = fleet.breaker_hook.clone()?;
    let id = id.clone();
    Some(Box::new(move |t: &Transition| hook(&id, t)))
}

/// Live state of one backend that outlives snapshot swaps and metadata
/// updates: in-flight count, breaker, residency, latency, health, counters.
#[derive(Debug)]
pub(crate) struct BackendState {
    pub(crate) id: BackendId,
    /// Unique within the fleet, never reused: keys the backend's pair
    /// breakers (an ID re-inserted after a removal gets a new state, and
    /// starts over).
    pub(crate) uid: u64,
    /// Requests in flight here and picked here.
    pub(crate) traffic: Traffic,
    pub(crate) fleet: Arc<Fleet>,
    pub(crate) breaker: Breaker,
    pub(crate) residency: Residency,
    pub(crate) latency: LatencyEwma,
    pub(crate) health: BackendHealth,
    /// Set when discovery removes the backend: not picked again.
    pub(crate) removed: AtomicBool,
}

impl BackendState {
    /// `warming`: it joins a running fleet (see
    /// [`HealthPolicy::warm_up`]); `latency_ms`: its first latency
    /// estimate.
    pub(crate) fn new(
        id: BackendId,
        policy: Policy,
        fleet: Arc<Fleet>,
        model_slots: usize,
        warming: bool,
        latency_ms: f64,
    ) -> Self {
        let breaker = Breaker::with_gauge(policy, fleet.not_closed.clone(), hook(&id, &fleet));
        Self {
            id,
            uid: fleet.next_uid.fetch_add(1, Ordering::Relaxed),
            traffic: Traffic::default(),
            breaker,
            residency: Residency::new(model_slots),
            latency: LatencyEwma::starting_at(latency_ms),
            health: BackendHealth::new(&fleet.health, warming),
            removed: AtomicBool::new(false),
            fleet,
        }
    }

    pub(crate) fn load(&self) -> usize {
        self.traffic.in_flight()
    }

    /// The cost of one more request here (see [`cost`]).
    pub(crate) fn cost(&self) -> f64 {
        cost(self.load(), self.latency.get(), self.health.weight.get())
    }

    /// Whether the backend may be picked at `now`: not removed, not
    /// ejected by health, and its breaker admitting.
    pub(crate) fn eligible(&self, now: Instant) -> bool {
        !self.is_removed() && !self.health.is_ejected() && self.breaker.admits(now)
    }

    /// Whether the backend counts as healthy for the panic threshold at
    /// `now`: eligible, and not kept in only by the ejection cap (Envoy
    /// counts such a host as unhealthy too).
    pub(crate) fn counts_healthy(&self, now: Instant) -> bool {
        self.eligible(now) && !self.health.is_held()
    }

    pub(crate) fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Relaxed)
    }

    /// Marks the backend removed (not picked again), counted in
    /// [`Fleet::removed`] until the state is dropped.
    pub(crate) fn mark_removed(&self) {
        if !self.removed.swap(true, Ordering::Relaxed) {
            self.fleet.removed.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether the backend may be picked for the model with hash `key` at
    /// `now`: not removed, not ejected by health, and the breaker in scope
    /// admitting — the
    /// backend's, or in `BackendModel` scope the (backend, model) pair's
    /// (lock-free unless a pair near it is not closed).
    #[inline]
    pub(crate) fn eligible_for(&self, key: u64, now: &Now) -> bool {
        match &self.fleet.scoped {
            None => {
                !self.is_removed()
                    && !self.health.is_ejected()
                    && self.breaker.admits_with(|| now.get())
            }
            Some(pairs) => {
                !self.is_drained()
                    && !self.is_removed()
                    && !self.health.is_ejected()
                    && pairs.admits(self.uid, key, now.get())
            }
        }
    }

    /// Whether the backend's breaker was forced open by hand: left out of
    /// every pick, panic mode's included, in either breaker scope.
    pub(crate) fn is_drained(&self) -> bool {
        self.breaker.is_forced_open()
    }

    /// Admission of a request for the model with hash `key` by the
    /// breaker in scope (see [`BackendState::eligible_for`]), or `None` when
    /// it refuses. In `BackendModel` scope this takes the pair map's lock
    /// briefly.
    /// Counts one failure that was no request's own (a model load that
    /// failed) for the breaker in scope and for health: untimed, so never
    /// a slow call. A breaker that refuses (open) counts nothing more.
    pub(crate) fn record_failure(&self, key: u64, now: Instant) {
        let penalty = self.fleet.health.failure_penalty;
        self.health.record(None, true, penalty);
        match self.try_acquire(key, &Now::at(now)) {
            Some(Admission::Backend(ticket)) => {
                self.breaker
                    .record_ticket_with(ticket, Outcome::Failure, None, || now);
            }
            Some(Admission::Pair(breaker, ticket)) => {
                breaker.record_ticket_at(ticket, Outcome::Failure, None, now);
            }
            Some(Admission::Bypass) | None => {}
        }
    }

    #[inline]
    pub(crate) fn try_acquire(&self, key: u64, now: &Now) -> Option<Admission> {
        match &self.fleet.scoped {
            None => self
                .breaker
                .try_ticket_with(|| now.get())
                .ok()
                .map(Admission::Backend),
            Some(pairs) => pairs
                .try_acquire(self.uid, key, now.get())
                .map(|(breaker, ticket)| Admission::Pair(breaker, ticket)),
        }
    }
}

impl Drop for BackendState {
    fn drop(&mut self) {
        if *self.removed.get_mut() {
            self.fleet.removed.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// How a picked request was admitted, to be given back when it ends.
#[derive(Debug)]
pub(crate) enum Admission {
    /// A ticket of the backend's own breaker (no clone of it needed: the
    /// guard holds the backend).
    Backend(Ticket),
    /// A ticket of a (backend, model) pair's breaker, with the breaker
    /// (the pair may be evicted from the map before the request ends).
    Pair(Breaker, Ticket),
    /// Panic mode: no breaker was asked.
    Bypass,
}

/// Ring and backend states; `backends[i]` is ring member `i`.
#[derive(Debug)]
pub(crate) struct Table {
    pub(crate) ring: Ring,
    pub(crate) backends: Vec<Arc<BackendState>>,
    pub(crate) fleet: Arc<Fleet>,
    /// The backends the ring in force stands for: each counts by the share
    /// of its target points it holds, up to one — a backend whose join is
    /// still staged counts for the part of the ring it has. Demand sizes
    /// models' owners over this, so that owners grow with the ring's
    /// steps rather than all at once when backends join.
    pub(crate) in_ring: f64,
}

impl Table {
    pub(crate) fn empty(fleet: Arc<Fleet>) -> Self {
        Self {
            ring: Ring::build(&Default::default(), Vec::new()).expect("an empty ring is valid"),
            backends: Vec::new(),
            fleet,
            in_ring: 0.0,
        }
    }

    /// Requests in flight over every backend.
    pub(crate) fn fleet_load(&self) -> usize {
        self.fleet.traffic.in_flight()
    }
}

/// What the request path loads: the table and the endpoints, index for
/// index.
#[derive(Debug)]
pub(crate) struct Snapshot<E> {
    pub(crate) table: Arc<Table>,
    pub(crate) endpoints: Vec<E>,
}
