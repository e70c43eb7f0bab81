//! Applying discovery changes and publishing snapshots.
//!
//! Changes are drained in batches: every change ready at once is applied,
//! then one snapshot (ring rebuilt, table and endpoints) is published.
//!
//! Joins and weight changes are staged (see [`staging`]): each entry keeps
//! the points the ring in force gives it, and the ring moves towards the
//! points the weights call for one step at a time, steps at least the
//! configured cooldown apart. A batch takes its first step at once when the
//! last step is a cooldown old (or the ring has no points), else when it
//! is; a change that arrives meanwhile is published at once (a removal, new
//! metadata, a joining backend with no points yet) and re-targets the next
//! step. Removals are not staged: a removed backend is ineligible at once.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use tokio::time::Instant;
use tower::discover::{Change, Discover};

use self::staging::Counts;
use crate::backend::{Backend, BackendId, BackendMeta};
use crate::balance::config::fields::BalanceConfig;
use crate::balance::state::backend::{BackendState, Start};
use crate::balance::state::cost;
use crate::balance::state::fleet::Fleet;
use crate::balance::state::health::WarmUp;
use crate::balance::state::shared::Shared;
use crate::balance::state::table::{Snapshot, Table};
use crate::breaker::BreakerConfig;
use crate::error::BoxError;
use crate::ring::{Ring, MAX_POINTS};

#[derive(Debug)]
struct Entry<K, E> {
    key: K,
    meta: BackendMeta,
    endpoint: E,
    state: Arc<BackendState>,
    /// Points the ring in force gives the backend: its first `points`
    /// vnodes (see [`Ring::build_with_points`]).
    points: u32,
}

/// The backends discovery has announced, by key.
#[derive(Debug)]
pub(crate) struct Registry<K, E> {
    entries: Vec<Entry<K, E>>,
    config: BalanceConfig,
    fleet: Arc<Fleet>,
    /// The first backend ID inserted under a second key (and ignored):
    /// the balancer's constructor refuses its first backend set with it
    /// ([`take_duplicate`](Self::take_duplicate)); later ones are counted
    /// and logged only.
    duplicate: Option<BackendId>,
}

/// How a drain of ready changes ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Drained {
    /// No more changes ready now; `changed` if any was applied.
    Pending { changed: bool },
    /// The source ended (or failed); no more changes will come.
    Done,
}

impl<K: Eq, E: Clone> Registry<K, E> {
    pub(crate) fn new(config: BalanceConfig) -> Self {
        Self {
            fleet: Arc::new(Fleet::for_config(&config)),
            entries: Vec::new(),
            config,
            duplicate: None,
        }
    }

    /// The first backend ID discovery inserted under a second key since
    /// the registry was built, if any; taken once.
    pub(crate) fn take_duplicate(&mut self) -> Option<BackendId> {
        self.duplicate.take()
    }

    fn apply(&mut self, change: Change<K, Backend<E>>) {
        match change {
            Change::Insert(key, Backend { meta, endpoint }) => {
                if !self.fits(&key, &meta) {
                    self.fleet.gauges.ignored.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(backend = %meta.id, weight = meta.weight, "discovery inserted a backend that would take the ring past its point limit; ignored");
                    return;
                }
                if let Some(other) = self
                    .entries
                    .iter()
                    .find(|e| e.key != key && e.meta.id == meta.id)
                {
                    self.fleet.gauges.ignored.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(backend = %other.meta.id, "discovery inserted a backend ID already in use under another key; ignored");
                    self.duplicate.get_or_insert_with(|| meta.id.clone());
                    return;
                }
                let (policy, fleet) = (&self.config.breaker, &self.fleet);
                let joining = Joining {
                    warm_up: match self.unplaced() {
                        true => WarmUp::None,
                        false => WarmUp::Ramp,
                    },
                    latency_ms: median_latency(&self.entries),
                };
                match self.entries.iter_mut().find(|e| e.key == key) {
                    Some(entry) => {
                        if entry.meta.id != meta.id {
                            entry.state.mark_removed();
                            entry.state = new_state(&meta, policy, fleet, joining);
                            // A new identity joins the ring from nothing.
                            entry.points = 0;
                        } else {
                            let residency = &entry.state.residency;
                            residency.set_slots(meta.model_slots);
                            let health = &entry.state.health;
                            health.set_meta(&meta);
                            if !meta.resident_models.is_empty() {
                                let now = fleet.millis(tokio::time::Instant::now());
                                let keys = meta.resident_models.iter().map(|m| m.hash64());
                                residency.replace(keys, now);
                            }
                        }
                        entry.meta = meta;
                        entry.endpoint = endpoint;
                    }
                    None => {
                        let state = new_state(&meta, policy, fleet, joining);
                        tracing::debug!(backend = %meta.id, "backend inserted");
                        self.entries.push(Entry {
                            key,
                            meta,
                            endpoint,
                            state,
                            points: 0,
                        });
                    }
                }
            }
            Change::Remove(key) => {
                if let Some(pos) = self.entries.iter().position(|e| e.key == key) {
                    let entry = self.entries.swap_remove(pos);
                    // Ineligible at once, also in snapshots still in use;
                    // requests in flight there finish normally.
                    entry.state.mark_removed();
                    tracing::debug!(backend = %entry.meta.id, "backend removed");
                }
            }
        }
    }

    /// Whether the ring still fits in its point limit with `meta` inserted
    /// under `key` (replacing what the key held), counting each backend at
    /// the larger of its current and target points: every step between
    /// them fits then.
    fn fits(&self, key: &K, meta: &BackendMeta) -> bool {
        let peak = |e: &Entry<K, E>| (e.points as usize).max(self.target(e.meta.weight));
        let others: usize = self
            .entries
            .iter()
            .filter(|e| &e.key != key)
            .map(peak)
            .fold(0, usize::saturating_add);
        let own = match self.entries.iter().find(|e| &e.key == key) {
            Some(e) if e.meta.id == meta.id => e.points as usize,
            _ => 0,
        };
        let own = own.max(self.target(meta.weight));
        others.saturating_add(own) <= MAX_POINTS
    }

    /// The points a weight calls for.
    fn target(&self, weight: u32) -> usize {
        let vnodes = self.config.ring.vnodes_per_weight().max(1) as usize;
        (weight as usize).saturating_mul(vnodes)
    }

    fn counts(&self) -> Vec<Counts<'_>> {
        let target =
            |e: &Entry<K, E>| u32::try_from(self.target(e.meta.weight)).unwrap_or(u32::MAX);
        self.entries
            .iter()
            .map(|e| Counts {
                id: &e.meta.id,
                current: e.points,
                target: target(e),
            })
            .collect()
    }

    /// Whether the ring in force is the one the weights call for.
    pub(crate) fn settled(&self) -> bool {
        staging::settled(&self.counts())
    }

    /// Whether the ring in force holds no point (nothing to stage from).
    fn unplaced(&self) -> bool {
        self.entries.iter().all(|e| e.points == 0)
    }

    /// Moves the ring one step towards the weights (all the way when it has
    /// no points, or staging is off).
    pub(crate) fn step(&mut self) {
        let next = staging::step(&self.counts(), self.config.staging.max_share);
        for (entry, points) in self.entries.iter_mut().zip(next) {
            if entry.points != points {
                tracing::debug!(backend = %entry.meta.id, from = entry.points, to = points, "ring points staged");
                entry.points = points;
            }
        }
    }

    /// The backends the ring in force stands for (see [`Table::in_ring`]).
    fn in_ring(&self) -> f64 {
        self.entries
            .iter()
            .map(|e| {
                let target = self.target(e.meta.weight).max(1) as f64;
                (f64::from(e.points) / target).min(1.0)
            })
            .sum()
    }

    /// Builds the snapshot of the current entries.
    pub(crate) fn snapshot(&self) -> Snapshot<E> {
        let members = self.entries.iter().map(|e| (e.meta.id.clone(), e.points));
        let ring = match Ring::build_with_points(&self.config.ring, members) {
            Ok(ring) => ring,
            Err(error) => {
                // IDs are unique and the point total bounded (both checked
                // on insert): not reached. Rather than panic,
                // route on no backends and say so.
                tracing::error!(%error, "cannot build the ring; no backend is routable");
                return Snapshot {
                    table: Arc::new(Table::empty(self.fleet.clone())),
                    endpoints: Vec::new(),
                };
            }
        };
        let table = Table {
            ring,
            backends: self.entries.iter().map(|e| e.state.clone()).collect(),
            fleet: self.fleet.clone(),
            in_ring: self.in_ring(),
            assigned: Default::default(),
        };
        Snapshot {
            table: Arc::new(table),
            endpoints: self.entries.iter().map(|e| e.endpoint.clone()).collect(),
        }
    }

    /// Applies every change `discover` has ready.
    pub(crate) fn drain<D>(&mut self, mut discover: Pin<&mut D>, cx: &mut Context<'_>) -> Drained
    where
        D: Discover<Key = K, Service = Backend<E>>,
        D::Error: Into<BoxError>,
    {
        let mut changed = false;
        loop {
            match discover.as_mut().poll_discover(cx) {
                Poll::Pending => return Drained::Pending { changed },
                Poll::Ready(Some(Ok(change))) => {
                    self.apply(change);
                    changed = true;
                }
                Poll::Ready(Some(Err(error))) => {
                    let error: BoxError = error.into();
                    tracing::warn!(%error, "discovery failed; keeping the last backend set");
                    return Drained::Done;
                }
                Poll::Ready(None) => return Drained::Done,
            }
        }
    }
}

/// How a new backend state starts.
#[derive(Debug, Clone, Copy)]
struct Joining {
    /// It joins a fleet already routing: it warms up.
    warm_up: WarmUp,
    /// Its first latency estimate, ms.
    latency_ms: f64,
}

/// The median latency estimate of the backends (see
/// [`cost::median_latency`]): a joining backend starts there, looking
/// neither faster (and flooded) nor slower (and starved) than those
/// measured.
fn median_latency<K, E>(entries: &[Entry<K, E>]) -> f64 {
    cost::median_latency(entries.iter().map(|e| e.state.latency.get()))
}

fn new_state(
    meta: &BackendMeta,
    policy: &BreakerConfig,
    fleet: &Arc<Fleet>,
    joining: Joining,
) -> Arc<BackendState> {
    let start = Start {
        model_slots: meta.model_slots,
        warm_up: joining.warm_up,
        latency_ms: joining.latency_ms,
    };
    let state = BackendState::new(meta.id.clone(), policy.clone(), fleet.clone(), start);
    state.health.set_meta(meta);
    if !meta.resident_models.is_empty() {
        // Metadata that lists none says nothing of what the server holds.
        let now = fleet.millis(tokio::time::Instant::now());
        let keys = meta.resident_models.iter().map(|m| m.hash64());
        state.residency.replace(keys, now);
    }
    Arc::new(state)
}

/// What woke the discovery task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wake {
    /// Changes were applied; more may come.
    Changed,
    /// The source ended (after applying what it had, if anything).
    Ended,
    /// The cooldown since the last step is over.
    Due,
    /// Every clone and handle of the balancer is gone.
    Gone,
}

/// Drives `discover` until it ends or every balancer clone and handle is
/// gone (`gone` resolves),
/// publishing a snapshot after each batch of changes and each staged step;
/// once the source ends, finishes staging what it announced.
pub(crate) async fn run<D, K, E>(
    mut discover: Pin<Box<D>>,
    mut registry: Registry<K, E>,
    shared: Weak<Shared<E>>,
    mut gone: tokio::sync::watch::Receiver<()>,
) where
    D: Discover<Key = K, Service = Backend<E>>,
    D::Error: Into<BoxError>,
    K: Eq,
    E: Clone,
{
    let cooldown = registry.config.staging.cooldown;
    // No staged step before `due`: the first comes at once.
    let mut due = Instant::now();
    let mut sleep = std::pin::pin!(tokio::time::sleep_until(due));
    let mut ended = false;
    let mut closed = std::pin::pin!(gone.changed());
    loop {
        let wake = poll_fn(|cx| {
            if closed.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Wake::Gone);
            }
            if !ended {
                match registry.drain(discover.as_mut(), cx) {
                    Drained::Pending { changed: false } => {}
                    Drained::Pending { changed: true } => return Poll::Ready(Wake::Changed),
                    Drained::Done => return Poll::Ready(Wake::Ended),
                }
            }
            if !registry.settled() && sleep.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Wake::Due);
            }
            Poll::Pending
        })
        .await;
        ended |= wake == Wake::Ended;
        let Some(shared) = shared.upgrade().filter(|_| wake != Wake::Gone) else {
            return;
        };
        let now = Instant::now();
        if registry.unplaced() {
            // Nothing to move away from: not a staged step.
            registry.step();
        } else if !registry.settled() && now >= due {
            registry.step();
            due = now + cooldown;
            sleep.as_mut().reset(due);
        }
        shared.publish(registry.snapshot());
        if ended && registry.settled() {
            return;
        }
    }
}

mod staging;

#[cfg(test)]
mod tests;
