//! What the handle reports: the balancer's counts by branch, and each
//! backend as the balancer sees it.

use std::sync::atomic::Ordering;

use crate::backend::BackendId;
use crate::balance::state::backend::BackendState;
use crate::breaker::{BreakerState, TransitionCounts};
use crate::health::HealthConfig;

/// The balancer's counters since it was built: requests by the branch it
/// took (every request lands in exactly one of `resident_owner` through
/// `shed_critical`), the waits for room, and the fleet's events (health
/// ejections, breaker trips, ignored inserts); and the pair breakers
/// tracked now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct BalanceStats {
    /// Inference requests sent to an owner of their model where the model
    /// was resident (as far as the balancer knew).
    pub resident_owner: u64,
    /// Inference requests sent to an owner that had to load the model.
    pub cold_owner: u64,
    /// Inference requests spilled past every owner along the ring.
    pub spill: u64,
    /// Requests routed in panic mode (too few eligible backends), over
    /// every backend.
    pub panic: u64,
    /// Inference requests sent to the backend holding the most of their
    /// prompt's cached blocks (feature `kv-events`).
    pub cached_blocks: u64,
    /// Update requests sent by P2C.
    pub update: u64,
    /// Requests failed fast with `NoHealthyBackend`.
    pub no_backend: u64,
    /// Requests failed fast with `InvalidRoute`.
    pub invalid_route: u64,
    /// `Normal` requests shed under admission with `Overloaded` (at once,
    /// after waiting, or pushed out of a full queue).
    pub shed_normal: u64,
    /// `High` requests shed under admission.
    pub shed_high: u64,
    /// `Critical` requests shed under admission.
    pub shed_critical: u64,
    /// Requests that waited for room under admission (each then counted
    /// where it went: a branch, or shed).
    pub queued: u64,
    /// The most requests that waited for room at once.
    pub queue_peak: u64,
    /// Health ejections (by score and as latency outliers) over all
    /// current backends since they joined.
    pub ejections: u64,
    /// Trips (closed to open) of the current backends' backend-level
    /// breakers; pair breakers are counted in `pair_breaker_trips`.
    pub breaker_trips: u64,
    /// Trips of the (backend, model) pair breakers, pairs evicted since
    /// included; 0 in [`BreakerScope::Backend`](crate::balance::BreakerScope::Backend).
    pub pair_breaker_trips: u64,
    /// The (backend, model) pairs whose breakers are tracked now, at most
    /// `max_pairs`; 0 in [`BreakerScope::Backend`](crate::balance::BreakerScope::Backend).
    pub tracked_pairs: usize,
    /// Inserts from discovery the balancer ignored (each also logged as a
    /// `tracing` warning): an ID already in use under another key after
    /// the first backend set (in that set,
    /// [`ModelBalancer::new`](crate::balance::ModelBalancer::new) refuses
    /// it with [`DuplicateBackend`](crate::error::DuplicateBackend)), or a
    /// backend that would take the ring past
    /// [`MAX_POINTS`](crate::ring::MAX_POINTS) points.
    pub ignored_backends: u64,
}

/// One backend as the balancer sees it now.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BackendStatus {
    /// The backend.
    pub id: BackendId,
    /// Requests sent and not yet finished (end of response body); counted
    /// up to 2^24 − 1 (about 16.7 million) at once.
    pub in_flight: usize,
    /// Its backend-level breaker's state. In
    /// [`BreakerScope::BackendModel`](crate::balance::BreakerScope::BackendModel)
    /// that breaker takes no traffic and stays closed: read the pairs with
    /// [`BalancerHandle::breaker_state`](crate::balance::BalancerHandle::breaker_state).
    pub breaker: BreakerState,
    /// Times its backend-level breaker opened.
    pub breaker_trips: u64,
    /// Times its backend-level breaker entered each state.
    pub breaker_transitions: TransitionCounts,
    /// Trips (closed to open) of its (backend, model) pair breakers since
    /// it joined, pairs evicted since included; 0 in
    /// [`BreakerScope::Backend`](crate::balance::BreakerScope::Backend).
    pub pair_breaker_trips: u64,
    /// Its pair breakers not closed now (open, or half-open until their
    /// probe succeeds); a pair evicted from the map leaves the count.
    pub pair_breakers_open: usize,
    /// Requests sent to it since it joined (a counter that wraps after
    /// 2^40, about a trillion).
    pub picked: u64,
    /// Its health score as last evaluated, in [0, 1].
    pub health: f64,
    /// Whether health ejected it from the eligible set.
    pub ejected: bool,
    /// Times health ejected it since it joined.
    pub ejections: u64,
    /// Requests that failed on it since it joined (errors, 5xx, 429, failed
    /// model loads).
    pub failures: u64,
    /// Event streams (`text/event-stream` answers, as OpenAI-compatible
    /// servers stream tokens) that succeeded on it since it joined: read to
    /// their end (a stream its caller dropped is not counted) with at least
    /// one chunk. A sample: only timed requests are (all of a clone's while
    /// its traffic is light, down to one in 16), so this is not a count of
    /// every stream; [`picked`](Self::picked) counts every request.
    pub streams: u64,
    /// Their mean time to first token since it joined: from the pick to
    /// the first frame that ends a `data:` chunk (comments such as
    /// `: keep-alive` are no chunk), ms; `None` before the first.
    pub ttft_mean_ms: Option<f64>,
    /// Their median time to first token since it joined, ms (within an
    /// eighth: the histogram's buckets are a quarter-octave wide).
    pub ttft_p50_ms: Option<f64>,
    /// Their 99th-percentile time to first token since it joined, ms (as
    /// `ttft_p50_ms`).
    pub ttft_p99_ms: Option<f64>,
    /// Their mean time per output token since it joined, ms: a stream's
    /// span from its first chunk's frame to its last's, over its chunks
    /// less one (`[DONE]` and error events are no chunks; one chunk is one
    /// token on vLLM and SGLang); `None` before a stream of two chunks.
    pub tpot_mean_ms: Option<f64>,
}

impl BackendStatus {
    /// `b` now, its health scored by `policy`.
    pub(crate) fn of(b: &BackendState, policy: &HealthConfig) -> Self {
        let stream = b.stream.figures();
        Self {
            id: b.id.clone(),
            in_flight: b.load(),
            breaker: b.breaker.state(),
            breaker_trips: b.breaker.trips(),
            breaker_transitions: b.breaker.transitions(),
            pair_breaker_trips: b.pairs.trips(),
            pair_breakers_open: b.pairs.not_closed(),
            picked: b.traffic.picked(),
            health: b.health.status(policy).score,
            ejected: b.health.is_ejected(),
            ejections: b.health.ejections.load(Ordering::Relaxed),
            failures: b.health.failed.load(Ordering::Relaxed),
            streams: stream.streams,
            ttft_mean_ms: stream.ttft_mean_ms,
            ttft_p50_ms: stream.ttft_p50_ms,
            ttft_p99_ms: stream.ttft_p99_ms,
            tpot_mean_ms: stream.tpot_mean_ms,
        }
    }
}
