//! Circuit breakers per (backend, model) pair, for
//! [`BreakerScope::BackendModel`].
//!
//! Why a scope at all: a multi-model server can fail for one model (weights
//! that do not fit, a corrupt adapter, a model-specific crash) while it
//! serves the others well. One breaker per backend then ejects it for every
//! model; one per pair ejects it only for the model that fails. The price is
//! that a backend failing for *every* model trips pair by pair, each model
//! paying the policy's `minimum_calls` before it moves away.
//!
//! Pairs are tracked in a map bounded to `max_pairs` entries, least
//! recently used evicted: a pair is used whenever a request takes a permit
//! from it, and — while any pair in its gauge slot is not closed — whenever
//! a request checks it, so a pair that is open because its model still
//! sends traffic stays tracked. An evicted pair forgets its failures (its
//! next request finds a fresh, closed breaker); its permits still in flight
//! record into the evicted breaker, which nothing else reads.
//!
//! Cost on the request path: checking a pair is one atomic load of a gauge
//! slot (the count of tracked breakers not closed whose pair hashes there)
//! while that count is zero — the common case — and a lookup under the
//! map's mutex otherwise. Taking a permit finds or inserts the pair's
//! breaker under the mutex (a hash lookup and a relink, no allocation once
//! the pair is tracked; inserting one allocates its breaker), then admits
//! through that breaker outside the mutex. Recording goes to the permit's
//! own breaker, never through the map.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::time::Instant;

use crate::balance::state::lru::Lru;
use crate::breaker::events::Hook;
use crate::breaker::{Breaker, BreakerConfig, BreakerState, OnTransition, Ticket, Transition};

/// The most gauge slots (a power of two).
const MAX_SLOTS: usize = 4096;

/// A (backend uid, model hash) pair.
type Pair = (u64, u64);

/// The pair breakers of one balancer.
pub(crate) struct Scoped {
    policy: BreakerConfig,
    pairs: Mutex<Lru<Pair, Breaker>>,
    /// Tracked breakers (and evicted ones still held by permits) not
    /// closed, by slot of their pair's hash: a zero slot lets a check skip
    /// the lookup.
    not_closed: Box<[Arc<AtomicUsize>]>,
    /// Pair breakers' trips (closed to open), evicted pairs' included.
    trips: Arc<Trips>,
}

/// Counts the trips of every pair breaker (their hooks add to it).
#[derive(Debug, Default)]
struct Trips(AtomicU64);

/// One backend's pair breakers, summed: what the metrics export per
/// backend (a series per pair would be up to `max_pairs` of them).
#[derive(Debug, Default)]
pub(crate) struct PairCounts {
    /// Trips (closed to open) of its pairs, evicted pairs' included.
    trips: AtomicU64,
    /// Its pair breakers not closed (open or half-open), tracked or held
    /// by a permit still in flight.
    not_closed: AtomicUsize,
}

impl PairCounts {
    /// Trips of the backend's pairs so far.
    pub(crate) fn trips(&self) -> u64 {
        self.trips.load(Ordering::Relaxed)
    }

    /// The backend's pair breakers open or half-open now.
    pub(crate) fn not_closed(&self) -> usize {
        self.not_closed.load(Ordering::Relaxed)
    }
}

/// The hook of one pair breaker: counts its trips for the fleet and its
/// backend, and keeps the backend's count of pairs not closed — its own
/// share given back when the breaker is dropped (evicted) not closed.
/// Hooks run after the breaker's lock is released, so two transitions
/// racing may be seen out of order: the count is then off by this
/// breaker's share until its next transition, never for good.
struct PairHook {
    fleet: Arc<Trips>,
    backend: Arc<PairCounts>,
    /// This breaker is counted in `backend.not_closed`.
    counted: AtomicBool,
}

impl OnTransition for PairHook {
    fn on_transition(&self, t: &Transition) {
        if t.from == BreakerState::Closed && t.to == BreakerState::Open {
            self.fleet.0.fetch_add(1, Ordering::Relaxed);
            self.backend.trips.fetch_add(1, Ordering::Relaxed);
        }
        let not_closed = t.to != BreakerState::Closed;
        if self.counted.swap(not_closed, Ordering::Relaxed) != not_closed {
            match not_closed {
                true => self.backend.not_closed.fetch_add(1, Ordering::Relaxed),
                false => self.backend.not_closed.fetch_sub(1, Ordering::Relaxed),
            };
        }
    }
}

impl Drop for PairHook {
    fn drop(&mut self) {
        if *self.counted.get_mut() {
            self.backend.not_closed.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Scoped {
    /// Pair breakers with `policy`, at most `max_pairs` tracked.
    pub(crate) fn new(policy: BreakerConfig, max_pairs: usize) -> Self {
        let slots = max_pairs.clamp(1, MAX_SLOTS).next_power_of_two();
        Self {
            policy,
            pairs: Mutex::new(Lru::new(max_pairs)),
            not_closed: (0..slots).map(|_| Arc::default()).collect(),
            trips: Arc::default(),
        }
    }

    /// Trips (closed to open) of the pair breakers so far.
    pub(crate) fn trips(&self) -> u64 {
        self.trips.0.load(Ordering::Relaxed)
    }

    /// Whether the pair's breaker would likely admit a call at `now`: an
    /// untracked pair would start closed. Lock-free while no breaker in the
    /// pair's slot is open or half-open.
    pub(crate) fn admits(&self, uid: u64, key: u64, now: Instant) -> bool {
        if self.slot(uid, key).load(Ordering::Relaxed) == 0 {
            return true;
        }
        self.lock()
            .get(&(uid, key))
            .is_none_or(|breaker| breaker.admits_with(|| now))
    }

    /// The pair's breaker (tracked from now on) with its ticket, or `None`
    /// when it refuses. A ticket rather than a [`Permit`]: the guard that
    /// keeps it is smaller, and no second clone of the breaker is made.
    ///
    /// [`Permit`]: crate::breaker::Permit
    /// `counts`: the backend's sums, which a new pair breaker's hook keeps.
    pub(crate) fn try_acquire(
        &self,
        uid: u64,
        key: u64,
        counts: &Arc<PairCounts>,
        now: Instant,
    ) -> Option<(Breaker, Ticket)> {
        let (breaker, evicted) = {
            let mut pairs = self.lock();
            let (breaker, evicted) = pairs.get_or_insert_with((uid, key), || {
                let hook = Hook::new(PairHook {
                    fleet: self.trips.clone(),
                    backend: counts.clone(),
                    counted: AtomicBool::new(false),
                });
                Breaker::with_gauge(self.policy.clone(), self.slot(uid, key).clone(), Some(hook))
            });
            (breaker.clone(), evicted)
        };
        // Dropped outside the lock: the last reference frees the breaker.
        drop(evicted);
        let ticket = breaker.try_ticket_at(now).ok()?;
        Some((breaker, ticket))
    }

    /// The pair's breaker state at `now`; `Closed` when it is not tracked.
    pub(crate) fn state(&self, uid: u64, key: u64, now: Instant) -> BreakerState {
        let breaker = self.lock().peek(&(uid, key)).cloned();
        breaker.map_or(BreakerState::Closed, |b| b.read_state(now))
    }

    /// Pairs tracked now.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn slot(&self, uid: u64, key: u64) -> &Arc<AtomicUsize> {
        let mask = self.not_closed.len() - 1;
        &self.not_closed[mix(key ^ uid.wrapping_mul(0x9e37_79b9_7f4a_7c15)) as usize & mask]
    }

    fn lock(&self) -> MutexGuard<'_, Lru<Pair, Breaker>> {
        // The map's links are only rewritten by code that does not panic
        // half-way, so a lock poisoned elsewhere is still sound.
        self.pairs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for Scoped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scoped")
            .field("policy", &self.policy)
            .field("pairs", &self.len())
            .field("slots", &self.not_closed.len())
            .finish()
    }
}

/// SplitMix64's finalizer.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests;
