//! One backend's live state, which outlives snapshot swaps and metadata
//! updates: in flight, breaker, residency, latency, health.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::backend::BackendId;
use crate::balance::state::clock::Now;
use crate::balance::state::cost::{cost, LatencyEwma};
use crate::balance::state::fleet::{Fleet, Settings};
use crate::balance::state::health::{BackendHealth, WarmUp};
use crate::balance::state::limit::BackendLimit;
use crate::balance::state::placement::Placement;
use crate::balance::state::prefix::PrefixRecord;
use crate::balance::state::residency::Residency;
use crate::balance::state::scoped::PairCounts;
use crate::balance::state::stream::StreamTimes;
use crate::balance::state::traffic::Traffic;
use crate::breaker::events::Hook;
use crate::breaker::{Breaker, BreakerConfig, Ticket, Transition};
use crate::classify::Outcome;
use crate::route::Urgency;

/// The fleet's breaker hook, told `id` in each transition.
fn hook(id: &BackendId, fleet: &Fleet) -> Option<Hook> {
    let hook = fleet.settings.breaker_hook.clone()?;
    let id = id.clone();
    Some(Hook::new(move |t: &Transition| {
        let mut t = t.clone();
        t.backend = Some(id.clone());
        hook.call(&t)
    }))
}

/// How a new backend state starts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Start {
    /// How many models it holds at once (the server's LRU).
    pub(crate) model_slots: usize,
    /// Whether its weight ramps up.
    pub(crate) warm_up: WarmUp,
    /// Its first latency estimate, ms.
    pub(crate) latency_ms: f64,
}

#[cfg(test)]
impl Default for Start {
    fn default() -> Self {
        Self {
            model_slots: 4,
            warm_up: WarmUp::None,
            latency_ms: crate::balance::state::cost::DEFAULT_LATENCY_MS,
        }
    }
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
    /// Its admission limit (infinite without admission).
    pub(crate) limit: BackendLimit,
    /// Its event streams' TTFT and TPOT.
    pub(crate) stream: StreamTimes,
    /// The prefix groups and sessions it served recently.
    pub(crate) prefixes: PrefixRecord,
    /// Set when discovery removes the backend: not picked again.
    pub(crate) removed: AtomicBool,
    /// Bumped each time the backend leaves the set the picks choose from
    /// (ejected by health, or removed): what the waits placement holds on
    /// it race against (see [`BackendState::gone`]).
    pub(crate) left: watch::Sender<u64>,
    /// Its pair breakers' trips and those not closed, in `BackendModel`
    /// scope.
    pub(crate) pairs: Arc<PairCounts>,
    /// What its prefix cache holds, from its KV-cache events (with a
    /// [`KvIndex`](crate::kv::KvIndex)).
    #[cfg(feature = "kv-events")]
    pub(crate) blocks: Option<Arc<crate::kv::BlockSet>>,
}

impl BackendState {
    /// What the config says, as the backends read it (the fleet's copy).
    #[inline]
    pub(crate) fn settings(&self) -> &Settings {
        &self.fleet.settings
    }

    /// A backend that starts as `start` says.
    pub(crate) fn new(
        id: BackendId,
        policy: BreakerConfig,
        fleet: Arc<Fleet>,
        start: Start,
    ) -> Self {
        let breaker =
            Breaker::with_gauge(policy, fleet.gauges.not_closed.clone(), hook(&id, &fleet));
        Self {
            uid: fleet.next_uid.fetch_add(1, Ordering::Relaxed),
            traffic: Traffic::default(),
            breaker,
            residency: Residency::new(start.model_slots),
            latency: LatencyEwma::starting_at(start.latency_ms),
            health: BackendHealth::new(&fleet.settings.health, start.warm_up),
            removed: AtomicBool::new(false),
            left: watch::Sender::new(0),
            limit: BackendLimit::new(fleet.admission()),
            stream: StreamTimes::new(),
            prefixes: PrefixRecord::default(),
            pairs: Arc::default(),
            #[cfg(feature = "kv-events")]
            blocks: fleet.settings.kv_index.as_ref().map(|index| index.set(&id)),
            id,
            fleet,
        }
    }

    pub(crate) fn load(&self) -> usize {
        self.traffic.in_flight()
    }

    /// On-demand placement, once enabled (the fleet's).
    #[inline]
    pub(crate) fn placement(&self) -> Option<&Arc<Placement>> {
        self.fleet.placement()
    }

    /// Now, on the fleet's millisecond clock (residency stamps): reads
    /// the clock.
    pub(crate) fn millis_now(&self) -> u64 {
        self.fleet.millis(Instant::now())
    }

    /// Under an adaptive admission limit, the limit learns from a timed
    /// request's `outcome` and `latency` (at the load in flight now).
    pub(crate) fn learn_limit(&self, outcome: Outcome, latency: Duration) {
        if let Some(admission) = self.fleet.admission() {
            self.limit.record(admission, outcome, latency, self.load());
        }
    }

    /// Whether it has room for one more request of `urgency` under its
    /// admission limit (always, without admission): `Critical` ones have
    /// the configured headroom above it.
    #[inline]
    pub(crate) fn has_room(&self, urgency: Urgency) -> bool {
        let load = self.load();
        let limit = self.limit.get();
        if load < limit {
            return true;
        }
        match (self.fleet.admission(), urgency) {
            (Some(admission), Urgency::Critical) => {
                load < limit.saturating_add(admission.headroom(limit))
            }
            _ => false,
        }
    }

    /// The cost of one more request here (see [`cost`]).
    pub(crate) fn cost(&self) -> f64 {
        let health = &self.health;
        cost(
            self.load(),
            self.latency.get(),
            health.score.get(),
            health.ramp.get(),
        )
    }

    /// Whether the backend may be picked at `now`: not removed, not
    /// ejected by health, and its breaker admitting.
    pub(crate) fn eligible(&self, now: Instant) -> bool {
        !self.is_removed() && !self.health.is_ejected() && self.breaker.admits_with(|| now)
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
    /// [`Gauges::removed`](crate::balance::state::fleet::Gauges::removed) until the state is dropped.
    pub(crate) fn mark_removed(&self) {
        if !self.removed.swap(true, Ordering::Relaxed) {
            self.fleet.gauges.removed.fetch_add(1, Ordering::Relaxed);
            self.leave();
        }
    }

    /// Tells what waits on the backend (see [`BackendState::gone`]) that
    /// it left: health ejected it, or discovery removed it.
    /// What its KV-cache events said it holds is forgotten: a backend
    /// ejected may come back restarted, with an empty cache, before its
    /// events say so (they tell of blocks stored, not of a restart).
    pub(crate) fn leave(&self) {
        self.left.send_modify(|n| *n = n.wrapping_add(1));
        #[cfg(feature = "kv-events")]
        if let Some(blocks) = &self.blocks {
            blocks.clear();
        }
    }

    /// Resolves, with why, once the backend leaves after now: ejected by
    /// health or removed — at once if it is removed already. Not for an
    /// ejection before now: a request picked here while it is ejected was
    /// sent on purpose (panic mode) and waits as it would have. The waits
    /// placement holds on a backend race it, so that a backend that hangs
    /// (a load call never answered) holds them only until health ejects
    /// it, not for the load timeout. Off the hot path: a cold request's.
    pub(crate) fn gone(self: &Arc<Self>) -> impl Future<Output = String> + Send + 'static {
        let mut left = self.left.subscribe();
        let state = Arc::downgrade(self);
        async move {
            let removed = |state: &std::sync::Weak<BackendState>| {
                state.upgrade().is_none_or(|s| s.is_removed())
            };
            // An `Err`: the state was dropped, so the backend removed.
            if !removed(&state) && left.changed().await.is_ok() && !removed(&state) {
                return "the backend was ejected by health while the request waited".to_owned();
            }
            "the backend was removed from the fleet while the request waited".to_owned()
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
        let penalty = self.settings().health.failure_penalty;
        self.health.record(None, Outcome::Failure, penalty);
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
                .try_acquire(self.uid, key, &self.pairs, now.get())
                .map(|(breaker, ticket)| Admission::Pair(breaker, ticket)),
        }
    }
}

impl Drop for BackendState {
    fn drop(&mut self) {
        if *self.removed.get_mut() {
            self.fleet.gauges.removed.fetch_sub(1, Ordering::Relaxed);
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
