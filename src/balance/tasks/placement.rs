//! On-demand placement's tasks: a model load per (backend, model),
//! started by the request that needs it ([`Placement::prepare`], and
//! [`Placement::prefetch`] under `PreferWarm`) and shared by every request
//! that waits for it; and the repository refresh, started by
//! [`BalancerHandle::enable_placement`](crate::balance::BalancerHandle::enable_placement).

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::task::Poll;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::{timeout_at, Instant};

use super::start::sleep_or_gone;
use crate::balance::state::backend::BackendState;
use crate::balance::state::load_limits::Limited;
use crate::balance::state::placement::{
    choose_victim, lock, wait, Candidate, Placement, Prepared, Status, MEMORY_FULL,
    MEMORY_SIGNALS_MAX_AGE,
};
use crate::balance::state::shared::View;
use crate::health::probe::ProbeTarget;
use crate::placement::Repository;
use crate::route::ModelId;

impl Placement {
    /// A request for `model` was routed to `state`, where the model is not
    /// known to be served: refuse it if the repository (as last read) does
    /// not know the model, else join the load running there or start one
    /// (within the bounds of `load_limits.rs`). A backend whose repository
    /// was never read loads nothing: the request waits for that first read
    /// (within the load timeout), then is prepared again — or fails at
    /// once if that read failed (a backend down since it joined).
    ///
    /// Every wait ends, failed, once the backend leaves (health ejects it,
    /// or discovery removes it: [`BackendState::gone`]): a backend that
    /// hangs holds the requests it owns only until then, not for the load
    /// timeout, and their retries go elsewhere (nothing was sent).
    pub(crate) fn prepare(self: &Arc<Self>, state: &Arc<BackendState>, model: ModelId) -> Prepared {
        match self.prepare_here(state, model) {
            Prepared::Wait(waiting) => {
                let gone = state.gone();
                Prepared::Wait(Box::pin(async move { or_gone(gone, waiting).await.0 }))
            }
            done => done,
        }
    }

    /// [`Placement::prepare`], its waits not raced against the backend's
    /// leaving.
    fn prepare_here(self: &Arc<Self>, state: &Arc<BackendState>, model: ModelId) -> Prepared {
        let key = model.hash64();
        match lock(&self.known).get(&state.uid) {
            None => {
                let first_read = self.clone().after_first_read(state.clone(), model);
                return Prepared::Wait(Box::pin(first_read));
            }
            Some(known) if !known.contains_key(&key) => {
                self.counters.unknown_models.fetch_add(1, Ordering::Relaxed);
                return Prepared::Unknown;
            }
            Some(_) => {}
        }
        if let Some(reason) = self.failed_recently(state.uid, key, Instant::now()) {
            return Prepared::Failed(reason);
        }
        match self.start(state, model.clone()) {
            Ok(load) => Prepared::Wait(Box::pin(wait(load))),
            // Too soon after its last load there: waits for the gap, on
            // its own future, within the load timeout.
            Err(Limited::TooSoon(at)) if at <= Instant::now() + self.policy.load_timeout => {
                let this = self.clone();
                let state = state.clone();
                Prepared::Wait(Box::pin(async move {
                    tokio::time::sleep_until(at).await;
                    this.prepare_again(&state, model).await
                }))
            }
            Err(limited) => Prepared::Failed(limited.reason()),
        }
    }

    /// [`Placement::prepare`] once more, after a wait, as the status the
    /// request reads.
    fn prepare_again(
        self: &Arc<Self>,
        state: &Arc<BackendState>,
        model: ModelId,
    ) -> impl Future<Output = Status> + Send + 'static {
        let prepared = self.prepare_here(state, model);
        async move {
            match prepared {
                Prepared::Wait(load) => load.await,
                Prepared::Unknown => Status::Unknown,
                Prepared::Failed(reason) => Status::Failed(reason),
            }
        }
    }

    /// Waits until `state`'s repository was read once (no task, no entry
    /// in the loads: the waiting request's own future), then prepares the
    /// request again.
    fn after_first_read(
        self: Arc<Self>,
        state: Arc<BackendState>,
        model: ModelId,
    ) -> impl Future<Output = Status> + Send + 'static {
        let mut indexed = self.indexed.subscribe();
        async move {
            let timeout = self.policy.load_timeout;
            let deadline = Instant::now() + timeout;
            while !lock(&self.known).contains_key(&state.uid) {
                if lock(&self.unreadable).contains(&state.uid) {
                    return Status::Failed("the backend's repository could not be read".into());
                }
                if !matches!(timeout_at(deadline, indexed.changed()).await, Ok(Ok(()))) {
                    return Status::Failed(format!(
                        "the backend's repository was not read within {timeout:?}"
                    ));
                }
            }
            self.prepare_again(&state, model).await
        }
    }

    /// A 404 from `state` for the model with hash `key`, believed served
    /// there: not resident after all; one reload starts (unless one runs,
    /// or a bound holds it back).
    pub(crate) fn not_found(self: &Arc<Self>, state: &Arc<BackendState>, key: u64) {
        state.residency.forget(key);
        let model = lock(&self.known)
            .get(&state.uid)
            .and_then(|known| known.get(&key).cloned());
        // A model the repository never listed is not reloaded.
        if let Some(model) = model {
            let running = lock(&self.loads).contains_key(&(state.uid, key));
            if self.start(state, model).is_ok() && !running {
                self.counters.reloads.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// With [`WhenCold::PreferWarm`](crate::placement::WhenCold): the
    /// request went elsewhere, the owner loads the model anyway — if its
    /// repository, read, lists it.
    pub(crate) fn prefetch(self: &Arc<Self>, state: &Arc<BackendState>, model: ModelId) {
        let key = model.hash64();
        let listed = lock(&self.known)
            .get(&state.uid)
            .is_some_and(|known| known.contains_key(&key));
        if listed {
            let _ = self.start(state, model);
        }
    }

    /// The load of `model` on `state`: the one running, or a new one if
    /// the bounds allow it.
    fn start(
        self: &Arc<Self>,
        state: &Arc<BackendState>,
        model: ModelId,
    ) -> Result<watch::Receiver<Status>, Limited> {
        let slot = (state.uid, model.hash64());
        let mut loads = lock(&self.loads);
        if let Some(running) = loads.get(&slot) {
            return Ok(running.clone());
        }
        let here = loads.keys().filter(|(uid, _)| *uid == state.uid).count();
        if let Err(limited) = lock(&self.rate).take(slot, here, Instant::now()) {
            self.counters.loads_limited.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(backend = %state.id, model = %model, ?limited, "load not started");
            return Err(limited);
        }
        let (tx, rx) = watch::channel(Status::Pending);
        loads.insert(slot, rx.clone());
        drop(loads);
        self.counters.loads.fetch_add(1, Ordering::Relaxed);
        let this = self.clone();
        let gone = state.gone();
        let state = state.clone();
        super::start::spawn(&self.runtime, async move {
            // Ends, its waiters failed, once the backend leaves: the turn
            // it holds or waits for goes with it, and nothing stays in
            // the loads to be joined after the backend is back.
            let (status, left) = or_gone(gone, this.load(&state, &model)).await;
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
                    // Cut because the backend left: health has counted
                    // its failure already, and once it is back the model
                    // loads there again at once.
                    if !left {
                        this.remember_failure(state.uid, key, now, reason);
                    }
                    // One failure, however many requests waited for it;
                    // none when the backend answered (the model's fault).
                    if matches!(status, Status::Failed(_)) && !left {
                        state.record_failure(key, now);
                    }
                }
                Status::Unknown | Status::Pending => state.residency.forget(key),
            }
            lock(&this.loads).remove(&slot);
            // Nobody waiting is fine.
            let _ = tx.send(status);
        });
        Ok(rx)
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

    /// Notes that `state`'s repository could not be read: the requests
    /// waiting for its first read fail (and are retried elsewhere).
    fn unreadable(&self, state: &BackendState) {
        if lock(&self.unreadable).insert(state.uid) {
            self.indexed
                .send_modify(|reads| *reads = reads.wrapping_add(1));
        }
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
        lock(&self.unreadable).remove(&state.uid);
        self.indexed
            .send_modify(|reads| *reads = reads.wrapping_add(1));
        let now = state.fleet.millis(Instant::now());
        state
            .residency
            .sync(repository.resident.iter().map(ModelId::hash64), now);
    }

    /// The resident model to unload from `state` to make room: see
    /// [`choose_victim`].
    fn victim<'a>(&self, state: &BackendState, resident: &'a [ModelId]) -> Option<&'a ModelId> {
        let view = self.owners.upgrade()?;
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
}

/// `waiting`'s status, or a failure with `gone`'s reason if it comes
/// first; true when it did.
async fn or_gone(
    gone: impl Future<Output = String>,
    waiting: impl Future<Output = Status>,
) -> (Status, bool) {
    let (mut gone, mut waiting) = (std::pin::pin!(gone), std::pin::pin!(waiting));
    std::future::poll_fn(|cx| {
        if let Poll::Ready(status) = waiting.as_mut().poll(cx) {
            return Poll::Ready((status, false));
        }
        gone.as_mut()
            .poll(cx)
            .map(|reason| (Status::Failed(reason), true))
    })
    .await
}

/// Re-reads every backend's repository, an interval apart, until the
/// balancer is gone.
pub(crate) async fn refresh(
    placement: Arc<Placement>,
    view: Weak<dyn View>,
    mut gone: watch::Receiver<()>,
) {
    loop {
        let Some(view) = view.upgrade() else {
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
            let wait = placement
                .policy
                .repository_interval
                .min(Duration::from_secs(10));
            match tokio::time::timeout(wait, placement.loader.repository(&target)).await {
                Ok(Ok(repository)) => placement.remember(state, &repository),
                Ok(Err(error)) => {
                    tracing::debug!(backend = %state.id, %error, "repository not read");
                    placement.unreadable(state);
                }
                Err(_) => {
                    tracing::debug!(backend = %state.id, "repository read timed out");
                    placement.unreadable(state);
                }
            }
        }
        drop(table);
        if sleep_or_gone(round + placement.policy.repository_interval, &mut gone).await {
            return;
        }
    }
}
