//! The routing snapshot: ring plus per-backend state, swapped atomically.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::backend::BackendId;
use crate::breaker::{Breaker, Policy};
use crate::ring::Ring;

/// Live state of one backend that outlives snapshot swaps and metadata
/// updates: in-flight count, breaker, counters.
#[derive(Debug)]
pub(crate) struct BackendState {
    pub(crate) id: BackendId,
    pub(crate) in_flight: AtomicUsize,
    /// In flight over every backend of the balancer (shared by all).
    pub(crate) fleet_in_flight: Arc<AtomicUsize>,
    pub(crate) breaker: Breaker,
    pub(crate) picked: AtomicU64,
}

impl BackendState {
    pub(crate) fn new(id: BackendId, policy: Policy, fleet_in_flight: Arc<AtomicUsize>) -> Self {
        Self {
            id,
            in_flight: AtomicUsize::new(0),
            fleet_in_flight,
            breaker: Breaker::new(policy),
            picked: AtomicU64::new(0),
        }
    }

    pub(crate) fn load(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }
}

/// Ring and backend states; `backends[i]` is ring member `i`.
#[derive(Debug)]
pub(crate) struct Table {
    pub(crate) ring: Ring,
    pub(crate) backends: Vec<Arc<BackendState>>,
    pub(crate) fleet_in_flight: Arc<AtomicUsize>,
}

impl Table {
    pub(crate) fn empty(fleet_in_flight: Arc<AtomicUsize>) -> Self {
        Self {
            ring: Ring::build(&Default::default(), Vec::new()).expect("an empty ring is valid"),
            backends: Vec::new(),
            fleet_in_flight,
        }
    }

    /// Requests in flight over every backend.
    pub(crate) fn fleet_load(&self) -> usize {
        self.fleet_in_flight.load(Ordering::Relaxed)
    }
}

/// What the request path loads: the table and the endpoints, index for
/// index.
#[derive(Debug)]
pub(crate) struct Snapshot<E> {
    pub(crate) table: Arc<Table>,
    pub(crate) endpoints: Vec<E>,
}
