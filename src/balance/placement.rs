//! The balancer's side of on-demand placement (see
//! [`placement`](crate::placement)): one load per (backend, model) shared by
//! every request that waits for it, the repository allow-list, room made by
//! unloading a model nobody needs there.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{timeout_at, Instant};

use super::handle::View;
use super::sleep_or_gone;
use super::table::BackendState;
use crate::health::probe::ProbeTarget;
use crate::placement::{LoadError, ModelLoader, PlacementPolicy, Repository};
use crate::route::ModelId;

/// GPU memory used, as a fraction of the backend's budget, at which it is
/// full and a load first unloads a model.
const MEMORY_FULL: f64 = 0.9;
/// The oldest load signals that say a backend's memory is full.
const MEMORY_SIGNALS_MAX_AGE: Duration = Duration::from_secs(30);

type BoxFuture<T> = Pin<Box<dyn Future<Output = Result<T, LoadError>> + Send>>;

/// [`ModelLoader`] behind a pointer.
trait Loader: Send + Sync {
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
    fn failed(error: &LoadError, what: &str) -> Self {
        let reason = format!("{what}: {error}");
        match error {
            LoadError::Transport(_) | LoadError::Timeout => Status::Failed(reason),
            _ => Status::Refused(reason),
        }
    }
}

/// What a request routed to a backend where its model is not served does.
#[derive(Debug)]
pub(crate) enum Prepared {
    /// Waits for the load (started now, or already running).
    Wait(watch::Receiver<Status>),
    /// Fails at once: the repository does not know the model.
    Unknown,
    /// Fails at once: a load of the model there failed less than
    /// [`LOAD_RETRY_AFTER`] ago, for this reason.
    Failed(String),
}

/// Placement's counters, readable from
/// [`BalancerHandle::placement_stats`](super::BalancerHandle::placement_stats).
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
}

#[derive(Debug, Default)]
struct Counters {
    loads: AtomicU64,
    load_failures: AtomicU64,
    unloads: AtomicU64,
    unknown_models: AtomicU64,
    reloads: AtomicU64,
}

/// Placement on one balancer.
pub(crate) struct Placement {
    loader: Box<dyn Loader>,
    policy: PlacementPolicy,
    runtime: tokio::runtime::Handle,
    view: Weak<dyn View>,
    /// Loads running, by (backend uid, model hash).
    loads: Mutex<HashMap<(u64, u64), watch::Receiver<Status>>>,
    /// Each backend's repository (by uid) as last read: the allow-list.
    known: Mutex<HashMap<u64, HashMap<u64, ModelId>>>,
    /// Loads that failed, by (backend uid, model hash): when, and why.
    failed: Mutex<HashMap<(u64, u64), (Instant, String)>>,
    /// One load at a time per backend (by uid): a load decides what to
    /// unload from the repository as it is once the one before has ended,
    /// and two loads never evict each other on the server. (Measured in
    /// the fleet example: loads at once up to the slots less one thrashed
    /// more — 108 loads on the busiest server against 51 — for a lower
    /// warm-hit rate.)
    turns: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<()>>>>,
    counters: Counters,
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
        policy: PlacementPolicy,
        runtime: tokio::runtime::Handle,
        view: Weak<dyn View>,
    ) -> Self {
        Self {
            loader: Box::new(loader),
            policy,
            runtime,
            view,
            loads: Mutex::default(),
            known: Mutex::default(),
            failed: Mutex::default(),
            turns: Mutex::default(),
            counters: Counters::default(),
        }
    }

    pub(crate) fn policy(&self) -> &PlacementPolicy {
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
        }
    }

    /// A request for `model` was routed to `state`, where the model is not
    /// known to be served: refuse it if the repository (as last read) does
    /// not know the model, else join the load running there or start one.
    pub(crate) fn prepare(self: &Arc<Self>, state: &Arc<BackendState>, model: ModelId) -> Prepared {
        let key = model.hash64();
        if let Some(known) = lock(&self.known).get(&state.uid) {
            if !known.contains_key(&key) {
                self.counters.unknown_models.fetch_add(1, Ordering::Relaxed);
                return Prepared::Unknown;
            }
        }
        if let Some(reason) = self.failed_recently(state.uid, key, Instant::now()) {
            return Prepared::Failed(reason);
        }
        Prepared::Wait(self.start(state, model))
    }

    /// Remembers that the load of model `key` on backend `uid` failed at
    /// `now` for `reason`.
    fn remember_failure(&self, uid: u64, key: u64, now: Instant, reason: &str) {
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
    fn failed_recently(&self, uid: u64, key: u64, now: Instant) -> Option<String> {
        let mut failed = lock(&self.failed);
        let (at, reason) = failed.get(&(uid, key))?;
        if now.saturating_duration_since(*at) < LOAD_RETRY_AFTER {
            return Some(reason.clone());
        }
        failed.remove(&(uid, key));
        None
    }

    /// A 404 from `state` for the model with hash `key`, believed served
    /// there: not resident after all; one reload starts (unless one runs).
    pub(crate) fn not_found(self: &Arc<Self>, state: &Arc<BackendState>, key: u64) {
        state.residency.forget(key);
        let model = lock(&self.known)
            .get(&state.uid)
            .and_then(|known| known.get(&key).cloned());
        // A model the repository never listed is not reloaded.
        if let Some(model) = model {
            if !lock(&self.loads).contains_key(&(state.uid, key)) {
                self.counters.reloads.fetch_add(1, Ordering::Relaxed);
            }
            drop(self.start(state, model));
        }
    }

    /// With [`WhenCold::PreferWarm`](crate::placement::WhenCold): the
    /// request went elsewhere, the owner loads the model anyway.
    pub(crate) fn prefetch(self: &Arc<Self>, state: &Arc<BackendState>, model: ModelId) {
        let key = model.hash64();
        let refused = lock(&self.known)
            .get(&state.uid)
            .is_some_and(|known| !known.contains_key(&key));
        if !refused {
            drop(self.start(state, model));
        }
    }

    /// The load of `model` on `state`: the one running, or a new one.
    fn start(
        self: &Arc<Self>,
        state: &Arc<BackendState>,
        model: ModelId,
    ) -> watch::Receiver<Status> {
        let slot = (state.uid, model.hash64());
        let mut loads = lock(&self.loads);
        if let Some(running) = loads.get(&slot) {
            return running.clone();
        }
        let (tx, rx) = watch::channel(Status::Pending);
        loads.insert(slot, rx.clone());
        drop(loads);
        self.counters.loads.fetch_add(1, Ordering::Relaxed);
        let this = self.clone();
        let state = state.clone();
        self.runtime.spawn(async move {
            let status = this.load(&state, &model).await;
            let key = model.hash64();
            match &status {
                Status::Loaded | Status::Resident => {
                    let now = state.fleet.millis(Instant::now());
                    state.residency.touch(key, now);
                    state.residency.confirm(key);
                }
                Status::Failed(reason) | Status::Refused(reason) => {
                    this.counters.load_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(backend = %state.id, model = %model, reason, "model load failed");
                    state.residency.forget(key);
                    let now = Instant::now();
                    this.remember_failure(state.uid, key, now, reason);
                    // One failure, however many requests waited for it;
                    // none when the backend answered (the model's fault).
                    if matches!(status, Status::Failed(_)) {
                        state.record_failure(key, now);
                    }
                }
                Status::Unknown | Status::Pending => state.residency.forget(key),
            }
            lock(&this.loads).remove(&slot);
            // Nobody waiting is fine.
            let _ = tx.send(status);
        });
        rx
    }

    /// Reads the repository, makes room, loads: all within the load
    /// timeout.
    async fn load(&self, state: &BackendState, model: &ModelId) -> Status {
        let Some(address) = state.health.address() else {
            return Status::Failed("the backend has no address".into());
        };
        let target = ProbeTarget::new(state.id.clone(), address);
        let timeout = self.policy.load_timeout;
        let deadline = Instant::now() + timeout;
        let timed_out = || Status::Failed(format!("timed out after {timeout:?}"));
        let turn = lock(&self.turns).entry(state.uid).or_default().clone();
        let Ok(_turn) = timeout_at(deadline, turn.lock()).await else {
            return timed_out();
        };
        let repository = match timeout_at(deadline, self.loader.repository(&target)).await {
            Ok(Ok(repository)) => repository,
            Ok(Err(error)) => return Status::failed(&error, "repository"),
            Err(_) => return timed_out(),
        };
        self.remember(state, &repository);
        let key = model.hash64();
        if !repository.known.iter().any(|m| m.hash64() == key) {
            self.counters.unknown_models.fetch_add(1, Ordering::Relaxed);
            return Status::Unknown;
        }
        if repository.resident.iter().any(|m| m.hash64() == key) {
            return Status::Resident;
        }
        let full = repository.resident.len() >= state.residency.capacity()
            || state
                .health
                .memory_full(MEMORY_FULL, MEMORY_SIGNALS_MAX_AGE, Instant::now());
        if self.policy.evict && full {
            if let Some(victim) = self.victim(state, &repository.resident) {
                self.counters.unloads.fetch_add(1, Ordering::Relaxed);
                match timeout_at(deadline, self.loader.unload(&target, victim)).await {
                    Ok(Ok(())) => state.residency.forget(victim.hash64()),
                    Ok(Err(error)) => {
                        tracing::debug!(backend = %state.id, model = %victim, %error, "unload failed")
                    }
                    Err(_) => return timed_out(),
                }
            }
        }
        match timeout_at(deadline, self.loader.load(&target, model)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Status::failed(&error, "load"),
            Err(_) => return timed_out(),
        }
        // What the server evicted to make room, if it did: the balancer
        // stops sending that model here before a request finds out by 404.
        if let Ok(Ok(repository)) = timeout_at(deadline, self.loader.repository(&target)).await {
            self.remember(state, &repository);
        }
        Status::Loaded
    }

    /// Keeps `repository` as `state`'s allow-list; its resident models are
    /// the server's own list.
    fn remember(&self, state: &BackendState, repository: &Repository) {
        let known = repository
            .known
            .iter()
            .map(|m| (m.hash64(), m.clone()))
            .collect();
        lock(&self.known).insert(state.uid, known);
        let now = state.fleet.millis(Instant::now());
        state
            .residency
            .sync(repository.resident.iter().map(ModelId::hash64), now);
    }

    /// The resident model to unload from `state` to make room: see
    /// [`choose_victim`].
    fn victim<'a>(&self, state: &BackendState, resident: &'a [ModelId]) -> Option<&'a ModelId> {
        let view = self.view.upgrade()?;
        let candidates: Vec<Candidate> = resident
            .iter()
            .map(|m| {
                let key = m.hash64();
                let (last_used_ms, in_flight) = state.residency.usage(key);
                Candidate {
                    last_used_ms,
                    in_flight,
                    owned: view.owns(state.uid, key),
                }
            })
            .collect();
        choose_victim(&candidates).map(|i| &resident[i])
    }

    /// Re-reads every backend's repository, an interval apart, until the
    /// balancer is gone.
    async fn refresh(self: Arc<Self>, mut gone: watch::Receiver<()>) {
        loop {
            let Some(view) = self.view.upgrade() else {
                return;
            };
            let table = view.table();
            drop(view);
            let round = Instant::now();
            for state in table.backends.iter().filter(|b| !b.is_removed()) {
                let Some(address) = state.health.address() else {
                    continue;
                };
                let target = ProbeTarget::new(state.id.clone(), address);
                let wait = self.policy.repository_interval.min(Duration::from_secs(10));
                match tokio::time::timeout(wait, self.loader.repository(&target)).await {
                    Ok(Ok(repository)) => self.remember(state, &repository),
                    Ok(Err(error)) => {
                        tracing::debug!(backend = %state.id, %error, "repository not read")
                    }
                    Err(_) => tracing::debug!(backend = %state.id, "repository read timed out"),
                }
            }
            drop(table);
            if sleep_or_gone(round + self.policy.repository_interval, &mut gone).await {
                return;
            }
        }
    }
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

/// The background task of placement: stops when dropped.
#[derive(Debug)]
#[must_use = "placement stops refreshing the repositories when the task is dropped"]
pub struct PlacementTask {
    task: JoinHandle<()>,
}

impl PlacementTask {
    /// Whether the task has stopped (its balancer is gone).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}

impl Drop for PlacementTask {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts `placement`'s repository refresh on its runtime.
pub(crate) fn spawn(placement: &Arc<Placement>, gone: watch::Receiver<()>) -> PlacementTask {
    PlacementTask {
        task: placement.runtime.spawn(placement.clone().refresh(gone)),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
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
