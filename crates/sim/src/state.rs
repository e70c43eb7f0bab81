//! What the handlers and tasks of a simulated server share: its
//! [`State`], [`lock`] for the state's mutexes, and the records the state
//! holds — the loads in progress ([`Loads`], each ending in an
//! [`Outcome`]) and the prefill engine's jobs ([`Job`], done as
//! [`Prefilled`]). The accept loop (`server`), the dispatcher (`handle`)
//! and the handlers import it; it imports none of them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{mpsc, oneshot, watch, Notify, Semaphore};
use tokio::time::Instant;

use super::config::ServerConfig;
use super::fault::Fault;
use super::residency::Residency;
use super::stats::Counters;

/// One server's state, shared by its accept loop, its handlers and the
/// tasks they start.
#[derive(Debug)]
pub(super) struct State {
    pub(super) name: String,
    pub(super) config: ServerConfig,
    /// The serving slots; an `Arc` so that a streamed answer's body can own
    /// its slot until it ends.
    pub(super) slots: Arc<Semaphore>,
    pub(super) residency: Mutex<Residency>,
    pub(super) fault: watch::Sender<Option<Fault>>,
    pub(super) counters: Counters,
    pub(super) gpu_uuid: String,
    /// Loads through the repository API in progress, and load calls.
    pub(super) loads: Mutex<Loads>,
    /// Woken when a request is answered, starts or stops hanging, when a
    /// streamed answer starts, sends a token, ends or is dropped, and when
    /// a load call arrives, a load starts or a load ends.
    pub(super) changed: Notify,
    /// Turns `true` when the server stops.
    pub(super) shutdown: watch::Receiver<bool>,
    /// The prefill engine, with the prefix cache on.
    pub(super) prefill: Option<mpsc::UnboundedSender<Job>>,
}

/// Locks `mutex`, taking the data of a poisoned one as it is.
pub(super) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How a load through the repository API ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// The model is ready.
    Loaded,
    /// It failed under [`Fault::LoadFails`].
    Failed,
    /// The model was evicted or unloaded before its load ended.
    Removed,
    /// The server stopped.
    Stopped,
}

impl Outcome {
    pub(super) fn reason(self) -> &'static str {
        match self {
            Self::Loaded => "loaded",
            Self::Failed => "simulated load failure",
            Self::Removed => "evicted or unloaded before its load ended",
            Self::Stopped => "server stopped",
        }
    }
}

/// Loads in progress and load calls in flight, by model.
#[derive(Debug, Default)]
pub(super) struct Loads {
    /// The outcome of each load in progress, once it ends.
    pub(super) pending: HashMap<String, watch::Receiver<Option<Outcome>>>,
    /// Load calls in flight, by model.
    pub(super) calls: HashMap<String, u64>,
    /// The most load calls for one model in flight at once.
    pub(super) max_calls: u64,
}

impl Loads {
    /// The most load calls for one model in flight at once, ever.
    pub(super) fn max_calls(&self) -> u64 {
        self.max_calls
    }

    /// The outcome of the load of `model` in progress, if one is.
    pub(super) fn pending(&self, model: &str) -> Option<watch::Receiver<Option<Outcome>>> {
        self.pending.get(model).cloned()
    }
}

/// One request's prefill.
#[derive(Debug)]
pub(crate) struct Job {
    /// Its prompt's full blocks.
    pub(crate) blocks: Vec<u64>,
    /// Its prompt's tokens.
    pub(crate) tokens: u64,
    /// When its model is resident (after any cold load).
    pub(crate) ready_at: Instant,
    /// The [`Fault::Slow`](super::Fault::Slow) factor (1 without).
    pub(crate) slow: u32,
    /// Told when the prefill is done.
    pub(crate) done: oneshot::Sender<Prefilled>,
    /// The server, whose counters the prefill adds to.
    pub(crate) state: Arc<State>,
}

/// A finished prefill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Prefilled {
    /// Prompt tokens.
    pub(crate) prompt: u64,
    /// Prompt tokens found in the cache (16 × the leading blocks found).
    pub(crate) cached: u64,
}
