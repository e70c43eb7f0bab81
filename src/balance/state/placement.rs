//! The book of on-demand placement (see [`placement`](crate::placement)):
//! the loads running, one per (backend, model) and shared by every request
//! that waits for it; each backend's repository as last read, the
//! allow-list; the loads that failed recently; the choice of a model to
//! unload. The loads themselves and the repository refresh run as
//! [tasks](crate::balance::tasks::placement).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::balance::state::load_limits::LoadRate;
use crate::health::probe::ProbeTarget;
use crate::placement::{LoadError, ModelLoader, PlacementConfig, Repository};
use crate::route::ModelId;

/// GPU memory used, as a fraction of the backend's budget, at which it is
/// full and a load first unloads a model.
pub(crate) const MEMORY_FULL: f64 = 0.9;
/// The oldest load signals that say a backend's memory is full.
pub(crate) const MEMORY_SIGNALS_MAX_AGE: Duration = Duration::from_secs(30);

pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, LoadError>> + Send>>;
/// What a request waits on for its model's load.
pub(crate) type Waiting = Pin<Box<dyn Future<Output = Status> + Send>>;

/// [`ModelLoader`] behind a pointer.
pub(crate) trait Loader: Send + Sync {
    fn load(&self, target: &ProbeTarget, model: &ModelId) -> BoxFuture<()>;
    fn unload(&self, target: &ProbeTarget, model: &ModelId) -> BoxFuture<()>;
    fn repository(&self, target: &ProbeTarget) -> BoxFuture<Repository>;
}

impl<L: ModelLoader> Loader for L {
    fn load(&self, target: &ProbeTarget, model: &ModelId) -> BoxFuture<()> {
        Box::pin(ModelLoader::load(self, target, model))
    }

    fn unload(&self, target: &ProbeTarget, model: &ModelId) -> BoxFuture<()> {
        Box::pin(ModelLoader::unload(self, target, model))
    }

    fn repository(&self, target: &ProbeTarget) -> BoxFuture<Repository> {
        Box::pin(ModelLoader::repository(self, target))
    }
}

/// Where a load stands, as the requests waiting for it see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Status {
    Pending,
    /// Loaded by this load.
    Loaded,
    /// The server held it already (the balancer's view was behind): no
    /// load was needed.
    Resident,
    /// The repository does not know the model: nothing was loaded.
    Unknown,
    /// The backend could not be reached, or did not answer in time: its
    /// failure (one for its breaker).
    Failed(String),
    /// The backend answered the load (or the repository read) with an
    /// error: the model's failure, not the backend's — one model that
    /// cannot load must not open every breaker it is tried on.
    Refused(String),
}

/// How long a failed or refused load of a model on a backend is not tried
/// again there: requests for it fail at once meanwhile.
const LOAD_RETRY_AFTER: Duration = Duration::from_secs(5);
/// Most (backend, model) load failures remembered; past it the oldest go.
const MAX_FAILED_LOADS: usize = 4096;

impl Status {
    /// The status of a load whose call failed with `error` (`what` says
    /// which call): the backend's failure when it could not be reached or
    /// timed out, else the model's.
    pub(crate) fn failed(error: &LoadError, what: &str) -> Self {
        let reason = format!("{what}: {error}");
        match error {
            LoadError::Transport(_) | LoadError::Timeout => Status::Failed(reason),
            _ => Status::Refused(reason),
        }
    }
}

/// What a request routed to a backend where its model is not served does.
pub(crate) enum Prepared {
    /// Waits for the load (started now, or already running), or, on a
    /// backend whose repository was never read, for that first read.
    Wait(Waiting),
    /// Fails at once: the repository does not know the model.
    Unknown,
    /// Fails at once: a load of the model there failed less than
    /// [`LOAD_RETRY_AFTER`] ago, for this reason.
    Failed(String),
}

/// Placement's counters, readable from
/// [`BalancerHandle::placement_stats`](crate::balance::BalancerHandle::placement_stats).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct PlacementStats {
    /// Loads started (one per (backend, model) at a time, however many
    /// requests waited). Each reads the repository first and sends a load
    /// call unless the model turned out resident or unknown, or the load
    /// timed out before its turn.
    pub loads: u64,
    /// Loads that failed or timed out.
    pub load_failures: u64,
    /// Unload calls sent to make room.
    pub unloads: u64,
    /// Requests refused because the repository does not know their model.
    pub unknown_models: u64,
    /// Reloads started by a 404 from a backend believed to hold the model.
    pub reloads: u64,
    /// Loads not started, or not yet, because of a bound: the backend had
    /// its most loads running or queued (8: the request failed at once
    /// with [`ModelLoadFailed`](crate::error::ModelLoadFailed)), or the
    /// model had started a load there less than 2 s before (the request
    /// waited for the gap; a reload after a 404 was not started).
    pub loads_limited: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) loads: AtomicU64,
    pub(crate) load_failures: AtomicU64,
    pub(crate) unloads: AtomicU64,
    pub(crate) unknown_models: AtomicU64,
    pub(crate) reloads: AtomicU64,
    pub(crate) loads_limited: AtomicU64,
}

/// Placement on one balancer.
pub(crate) struct Placement {
    pub(crate) loader: Box<dyn Loader>,
    pub(crate) policy: PlacementConfig,
    pub(crate) runtime: tokio::runtime::Handle,
    pub(crate) owners: Weak<dyn Owners>,
    /// Loads running, by (backend uid, model hash).
    pub(crate) loads: Mutex<HashMap<(u64, u64), watch::Receiver<Status>>>,
    /// Each backend's repository (by uid) as last read: the allow-list.
    pub(crate) known: Mutex<HashMap<u64, HashMap<u64, ModelId>>>,
    /// Loads that failed, by (backend uid, model hash): when, and why.
    pub(crate) failed: Mutex<HashMap<(u64, u64), (Instant, String)>>,
    /// Load starts per (backend uid, model hash) (see `load_limits.rs`).
    pub(crate) rate: Mutex<LoadRate>,
    /// Bumped each time a repository is read, or its read fails: requests
    /// for a backend whose repository was never read wait on it.
    pub(crate) indexed: watch::Sender<u64>,
    /// Backends (by uid) whose last repository read failed: a request
    /// waiting for their first read fails at once (and its retry goes
    /// elsewhere: nothing was sent).
    pub(crate) unreadable: Mutex<std::collections::HashSet<u64>>,
    /// One load at a time per backend (by uid): a load decides what to
    /// unload from the repository as it is once the one before has ended,
    /// and two loads never evict each other on the server. (Measured in
    /// the fleet example: loads at once up to the slots less one thrashed
    /// more — 108 loads on the busiest server against 51 — for a lower
    /// warm-hit rate.)
    pub(crate) turns: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<()>>>>,
    pub(crate) counters: Counters,
}

impl std::fmt::Debug for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Placement")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Placement {
    pub(crate) fn new<L: ModelLoader>(
        loader: L,
        policy: PlacementConfig,
        runtime: tokio::runtime::Handle,
        owners: Weak<dyn Owners>,
    ) -> Self {
        Self {
            loader: Box::new(loader),
            policy,
            runtime,
            owners,
            loads: Mutex::default(),
            known: Mutex::default(),
            failed: Mutex::default(),
            rate: Mutex::default(),
            indexed: watch::Sender::new(0),
            unreadable: Mutex::default(),
            turns: Mutex::default(),
            counters: Counters::default(),
        }
    }

    pub(crate) fn policy(&self) -> &PlacementConfig {
        &self.policy
    }

    pub(crate) fn stats(&self) -> PlacementStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        PlacementStats {
            loads: get(&c.loads),
            load_failures: get(&c.load_failures),
            unloads: get(&c.unloads),
            unknown_models: get(&c.unknown_models),
            reloads: get(&c.reloads),
            loads_limited: get(&c.loads_limited),
        }
    }

    /// Remembers that the load of model `key` on backend `uid` failed at
    /// `now` for `reason`.
    pub(crate) fn remember_failure(&self, uid: u64, key: u64, now: Instant, reason: &str) {
        let mut failed = lock(&self.failed);
        if failed.len() >= MAX_FAILED_LOADS {
            failed.retain(|_, (at, _)| now.saturating_duration_since(*at) < LOAD_RETRY_AFTER);
        }
        if failed.len() < MAX_FAILED_LOADS {
            failed.insert((uid, key), (now, reason.to_owned()));
        }
    }

    /// Why the load of model `key` on backend `uid` failed, if it did less
    /// than [`LOAD_RETRY_AFTER`] before `now`.
    pub(crate) fn failed_recently(&self, uid: u64, key: u64, now: Instant) -> Option<String> {
        let mut failed = lock(&self.failed);
        let (at, reason) = failed.get(&(uid, key))?;
        if now.saturating_duration_since(*at) < LOAD_RETRY_AFTER {
            return Some(reason.clone());
        }
        failed.remove(&(uid, key));
        None
    }
}

/// Who owns which model now, as eviction asks it (the balancer's shared
/// state, without its endpoint type).
pub(crate) trait Owners: Send + Sync {
    /// Whether the backend with `uid` is one of the owners of the model
    /// with hash `key` now.
    fn owns(&self, uid: u64, key: u64) -> bool;
}

/// A resident model as eviction sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// When it was last routed here (ms; 0 when the balancer has not).
    pub(crate) last_used_ms: u64,
    /// Its requests in flight here.
    pub(crate) in_flight: u32,
    /// Whether this backend is one of its owners under the current ring.
    pub(crate) owned: bool,
}

/// The model to unload: the least recently routed among those with no
/// request in flight that this backend does not own (an owner's copy is
/// what affinity keeps warm); `None` when every one is needed.
pub(crate) fn choose_victim(candidates: &[Candidate]) -> Option<usize> {
    candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| c.in_flight == 0 && !c.owned)
        .min_by_key(|(_, c)| c.last_used_ms)
        .map(|(i, _)| i)
}

/// Waits until the load leaves `Pending`.
pub(crate) async fn wait(mut rx: watch::Receiver<Status>) -> Status {
    loop {
        let status = rx.borrow_and_update().clone();
        if status != Status::Pending {
            return status;
        }
        if rx.changed().await.is_err() {
            // The load task ended without a word (its runtime shut down).
            return rx.borrow().clone().not_pending();
        }
    }
}

impl Status {
    /// A final status: `Pending` (never returned by [`wait`]) is a failure.
    pub(crate) fn not_pending(self) -> Self {
        match self {
            Status::Pending => Status::Failed("the load task stopped".into()),
            done => done,
        }
    }
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(last_used_ms: u64, in_flight: u32, owned: bool) -> Candidate {
        Candidate {
            last_used_ms,
            in_flight,
            owned,
        }
    }

    #[test]
    fn the_victim_is_the_least_recent_model_nobody_needs_here() {
        assert_eq!(choose_victim(&[c(5, 0, false), c(3, 0, false)]), Some(1));
        assert_eq!(
            choose_victim(&[c(5, 0, false), c(3, 1, false)]),
            Some(0),
            "never one with requests in flight"
        );
        assert_eq!(
            choose_victim(&[c(5, 0, false), c(3, 0, true)]),
            Some(0),
            "never one this backend owns"
        );
        assert_eq!(
            choose_victim(&[c(0, 0, false), c(3, 0, false)]),
            Some(0),
            "never routed here: first"
        );
        assert_eq!(
            choose_victim(&[c(1, 2, false), c(3, 0, true)]),
            None,
            "all needed"
        );
        assert_eq!(choose_victim(&[]), None);
    }
}
