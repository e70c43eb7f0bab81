//! The routing snapshot: ring plus per-backend state, swapped atomically.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::time::Instant;

use super::cost::{cost, Health, LatencyEwma};
use super::residency::Residency;
use crate::backend::BackendId;
use crate::breaker::{Breaker, Policy};
use crate::ring::Ring;

/// State shared by every backend of one balancer.
#[derive(Debug)]
pub(crate) struct Fleet {
    /// Requests in flight over every backend.
    pub(crate) in_flight: AtomicUsize,
    /// Backends whose breaker is open or half-open.
    pub(crate) not_closed: Arc<AtomicUsize>,
    /// Origin of the millisecond stamps in residency tables.
    pub(crate) base: Instant,
}

impl Fleet {
    pub(crate) fn new() -> Self {
        Self {
            in_flight: AtomicUsize::new(0),
            not_closed: Arc::default(),
            base: Instant::now(),
        }
    }

    /// Milliseconds from the fleet's base to `now`.
    pub(crate) fn millis(&self, now: Instant) -> u64 {
        let ms = now.saturating_duration_since(self.base).as_millis();
        u64::try_from(ms).unwrap_or(u64::MAX)
    }
}

/// Live state of one backend that outlives snapshot swaps and metadata
/// updates: in-flight count, breaker, residency, latency, health, counters.
#[derive(Debug)]
pub(crate) struct BackendState {
    pub(crate) id: BackendId,
    pub(crate) in_flight: AtomicUsize,
    pub(crate) fleet: Arc<Fleet>,
    pub(crate) breaker: Breaker,
    pub(crate) residency: Residency,
    pub(crate) latency: LatencyEwma,
    pub(crate) health: Health,
    /// Set when discovery removes the backend: not picked again.
    pub(crate) removed: AtomicBool,
    pub(crate) picked: AtomicU64,
}

impl BackendState {
    pub(crate) fn new(
        id: BackendId,
        policy: Policy,
        fleet: Arc<Fleet>,
        model_slots: usize,
    ) -> Self {
        Self {
            id,
            in_flight: AtomicUsize::new(0),
            breaker: Breaker::with_gauge(policy, fleet.not_closed.clone()),
            fleet,
            residency: Residency::new(model_slots),
            latency: LatencyEwma::new(),
            health: Health::new(),
            removed: AtomicBool::new(false),
            picked: AtomicU64::new(0),
        }
    }

    pub(crate) fn load(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// The cost of one more request here (see [`cost`]).
    pub(crate) fn cost(&self) -> f64 {
        cost(self.load(), self.latency.get(), self.health.get())
    }

    /// Whether the backend may be picked at `now`: not removed and its
    /// breaker admitting.
    pub(crate) fn eligible(&self, now: Instant) -> bool {
        !self.removed.load(Ordering::Relaxed) && self.breaker.admits(now)
    }

    pub(crate) fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Relaxed)
    }
}

/// Ring and backend states; `backends[i]` is ring member `i`.
#[derive(Debug)]
pub(crate) struct Table {
    pub(crate) ring: Ring,
    pub(crate) backends: Vec<Arc<BackendState>>,
    pub(crate) fleet: Arc<Fleet>,
}

impl Table {
    pub(crate) fn empty(fleet: Arc<Fleet>) -> Self {
        Self {
            ring: Ring::build(&Default::default(), Vec::new()).expect("an empty ring is valid"),
            backends: Vec::new(),
            fleet,
        }
    }

    /// Requests in flight over every backend.
    pub(crate) fn fleet_load(&self) -> usize {
        self.fleet.in_flight.load(Ordering::Relaxed)
    }
}

/// What the request path loads: the table and the endpoints, index for
/// index.
#[derive(Debug)]
pub(crate) struct Snapshot<E> {
    pub(crate) table: Arc<Table>,
    pub(crate) endpoints: Vec<E>,
}
