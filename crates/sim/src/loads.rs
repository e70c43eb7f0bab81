//! Loads through the repository API: one load per model at a time, in its
//! own task (a caller that hangs up does not stop it), and the load calls
//! in flight counted per model.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::time::Instant;

use super::fault::Fault;
use super::queue::Counted;
use super::state::{lock, Outcome, State};

/// One load call in flight for a model, counted until dropped (a call
/// whose connection closed leaves the count true).
pub(super) struct Call<'a> {
    state: &'a State,
    model: String,
}

impl<'a> Call<'a> {
    pub(super) fn enter(state: &'a State, model: &str) -> Self {
        let mut loads = lock(&state.loads);
        let calls = loads.calls.entry(model.to_owned()).or_default();
        *calls += 1;
        let calls = *calls;
        loads.max_calls = loads.max_calls.max(calls);
        drop(loads);
        state.changed.notify_waiters();
        Self {
            state,
            model: model.to_owned(),
        }
    }
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        let mut loads = lock(&self.state.loads);
        if let Some(calls) = loads.calls.get_mut(&self.model) {
            *calls -= 1;
            if *calls == 0 {
                loads.calls.remove(&self.model);
            }
        }
    }
}

/// What a load call found and led to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Loaded {
    /// The model was loaded already: nothing started.
    Already,
    /// This call started the load, which ended so.
    Started(Outcome),
    /// This call waited for a load in progress, which ended so.
    Joined(Outcome),
}

/// Loads `model` (a valid, known model ID) unless it is loaded already or
/// its load is in progress, which the call then waits for.
pub(super) async fn load(state: &Arc<State>, model: &str) -> Loaded {
    match begin(state, model) {
        Begun::Already => Loaded::Already,
        Begun::Joined(outcome) => Loaded::Joined(wait(outcome).await),
        Begun::Started(outcome) => {
            state.changed.notify_waiters();
            Loaded::Started(wait(outcome).await)
        }
    }
}

/// What [`begin`] found.
enum Begun {
    Already,
    Joined(watch::Receiver<Option<Outcome>>),
    Started(watch::Receiver<Option<Outcome>>),
}

/// Joins the load of `model` in progress, or finds it loaded, or starts
/// its load, all under one lock of the loads.
fn begin(state: &Arc<State>, model: &str) -> Begun {
    let mut loads = lock(&state.loads);
    if let Some(pending) = loads.pending.get(model) {
        return Begun::Joined(pending.clone());
    }
    let mut residency = lock(&state.residency);
    let now = Instant::now();
    if residency.lookup(model, now, true) == Some(true) {
        return Begun::Already;
    }
    // Resident now, `LOADING`: the LRU model makes room at once.
    residency.start_load(model, now);
    drop(residency);
    let (done, outcome) = watch::channel(None);
    loads.pending.insert(model.to_owned(), outcome.clone());
    state.counters.loads_started.fetch_add(1, Ordering::Relaxed);
    state.counters.cold_loads.fetch_add(1, Ordering::Relaxed);
    // Its own task: the load goes on if this call's client hangs up.
    tokio::spawn(run(state.clone(), model.to_owned(), done));
    Begun::Started(outcome)
}

/// The outcome of a load, once it ends.
pub(super) async fn wait(mut outcome: watch::Receiver<Option<Outcome>>) -> Outcome {
    match outcome.wait_for(Option::is_some).await {
        Ok(ended) => ended.unwrap_or(Outcome::Stopped),
        Err(_) => Outcome::Stopped,
    }
}

/// The load of `model`: a serving slot for the cold-load time, then ready
/// unless a fault says otherwise; ends when the server stops.
async fn run(state: Arc<State>, model: String, done: watch::Sender<Option<Outcome>>) {
    let mut shutdown = state.shutdown.clone();
    let outcome = tokio::select! {
        outcome = loading(&state) => outcome,
        _ = shutdown.wait_for(|&stopped| stopped) => Outcome::Stopped,
    };
    let outcome = {
        let mut loads = lock(&state.loads);
        loads.pending.remove(&model);
        let mut residency = lock(&state.residency);
        match outcome {
            Outcome::Loaded if !residency.finish_load(&model, Instant::now()) => Outcome::Removed,
            Outcome::Loaded => Outcome::Loaded,
            other => {
                residency.abort_load(&model);
                other
            }
        }
    };
    if outcome != Outcome::Loaded {
        state.counters.loads_failed.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(backend = %state.name, model = %model, reason = outcome.reason(), "sim load failed");
    }
    done.send_replace(Some(outcome));
    state.changed.notify_waiters();
}

/// Waits for a serving slot, holds it for the cold-load time, then ends
/// as the fault at that moment says: failed under [`Fault::LoadFails`],
/// not before it is lifted under [`Fault::LoadHangs`].
async fn loading(state: &State) -> Outcome {
    let waiting = Counted::enter(&state.counters.waiting);
    let Ok(_slot) = state.slots.acquire().await else {
        return Outcome::Stopped;
    };
    drop(waiting);
    let _running = Counted::enter(&state.counters.running);
    tokio::time::sleep(state.config.cold_load).await;
    let mut fault = state.fault.subscribe();
    loop {
        let now = *fault.borrow_and_update();
        match now {
            Some(Fault::LoadFails) => return Outcome::Failed,
            Some(Fault::LoadHangs) => {}
            _ => return Outcome::Loaded,
        }
        if fault.changed().await.is_err() {
            return Outcome::Stopped;
        }
    }
}
