//! The counters of a simulated server.

use std::sync::atomic::AtomicU64;

#[cfg(doc)]
use super::fault::Fault;

/// Counters of one simulated server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ServerStats {
    /// Requests received (every path).
    pub requests: u64,
    /// Inference and update requests received.
    pub work: u64,
    /// Model loads started: by inference requests in the auto-load mode,
    /// by load calls in the explicit mode (there it equals
    /// [`loads_started`](Self::loads_started)).
    pub cold_loads: u64,
    /// Requests answered 503 because of a fault (readiness checks apart).
    pub unavailable: u64,
    /// Inference and update requests waiting now: behind a
    /// [`Fault::Backlog`] or for a serving slot (the phantom requests of
    /// the backlog not counted); and loads waiting for a serving slot.
    pub waiting: u64,
    /// The most inference and update requests that waited at once, over
    /// the server's life: its peak queue length.
    pub max_waiting: u64,
    /// Inference and update requests holding a serving slot now, and
    /// loads (each holds one for its cold-load time).
    pub running: u64,
    /// Inference requests answered 404 because their model is not in the
    /// [repository](super::ServerConfigBuilder::repository) or, in the
    /// [explicit mode](super::ServerConfigBuilder::explicit_load), not
    /// loaded. None of them loads a model or takes a serving slot.
    pub not_found: u64,
    /// Load calls received (`POST /v2/repository/models/{name}/load` and
    /// `POST /v1/load_lora_adapter`), whatever their answer.
    pub load_calls: u64,
    /// Loads started by load calls. A call for a model already loaded, or
    /// whose load is in progress (it waits for that load), starts none.
    pub loads_started: u64,
    /// Loads started by load calls that failed: under
    /// [`Fault::LoadFails`], or the model evicted or unloaded before its
    /// load ended.
    pub loads_failed: u64,
    /// The most load calls for one model in flight at once on this server
    /// (received and not yet answered), over its life: 1 when every
    /// client single-flights its loads, whether or not a call finds the
    /// model loaded.
    pub max_concurrent_loads_per_model: u64,
    /// Resident models (loaded or loading) removed by unload calls.
    pub unloads: u64,
    /// Resident models evicted by the LRU to make room for another (in
    /// both modes; unloads not counted).
    pub evictions: u64,
    /// Requests held unanswered by a [`Fault::Hang`] now: each until its
    /// client closes the connection or the server stops.
    pub hung: u64,
    /// Streamed answers started: `200` sent with `text/event-stream`
    /// once the request had its serving slot, before its prefill (see
    /// [`protocol`](super::protocol#streaming)).
    pub streams: u64,
    /// Streamed answers sent to their end: through `data: [DONE]`, or
    /// through the error event of a [`Fault::StreamError`] or the cut of a
    /// [`Fault::StreamCut`] or [`Fault::Reset`].
    pub streams_completed: u64,
    /// Streamed answers dropped before their end: the client closed the
    /// connection (or the server stopped) mid-stream. Each released its
    /// serving slot then.
    pub streams_cancelled: u64,
    /// Token events sent, over all streamed answers.
    pub tokens_sent: u64,
    /// Prompt tokens of the prefills run (with the
    /// [prefix cache](super::ServerConfigBuilder::prefix_cache) on; 0
    /// without): vLLM's `prefix_cache_queries`.
    pub prompt_tokens: u64,
    /// Of those, the tokens found in the prefix cache: vLLM's
    /// `prefix_cache_hits`.
    pub cached_tokens: u64,
}

/// The counters behind [`ServerStats`], shared by the server's tasks.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) requests: AtomicU64,
    pub(super) work: AtomicU64,
    pub(super) cold_loads: AtomicU64,
    pub(super) unavailable: AtomicU64,
    pub(super) waiting: AtomicU64,
    pub(super) max_waiting: AtomicU64,
    pub(super) running: AtomicU64,
    pub(super) not_found: AtomicU64,
    pub(super) load_calls: AtomicU64,
    pub(super) loads_started: AtomicU64,
    pub(super) loads_failed: AtomicU64,
    pub(super) unloads: AtomicU64,
    pub(super) hung: AtomicU64,
    pub(super) streams: AtomicU64,
    pub(super) streams_completed: AtomicU64,
    pub(super) streams_cancelled: AtomicU64,
    pub(super) tokens_sent: AtomicU64,
    pub(super) prompt_tokens: AtomicU64,
    pub(super) cached_tokens: AtomicU64,
}
