//! Applying discovery changes and publishing snapshots.
//!
//! Changes are drained in batches: every change ready at once is applied,
//! then one snapshot (ring rebuilt, table and endpoints) is published.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use tower::discover::{Change, Discover};

use super::table::{BackendState, Fleet, Snapshot, Table};
use super::{Backend, BackendMeta, BalanceConfig, Shared};
use crate::breaker::Policy;
use crate::error::BoxError;
use crate::ring::{Ring, MAX_POINTS};

#[derive(Debug)]
struct Entry<K, E> {
    key: K,
    meta: BackendMeta,
    endpoint: E,
    state: Arc<BackendState>,
}

/// The backends discovery has announced, by key.
#[derive(Debug)]
pub(crate) struct Registry<K, E> {
    entries: Vec<Entry<K, E>>,
    config: BalanceConfig,
    fleet: Arc<Fleet>,
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
            entries: Vec::new(),
            config,
            fleet: Arc::new(Fleet::new()),
        }
    }

    fn apply(&mut self, change: Change<K, Backend<E>>) {
        match change {
            Change::Insert(key, Backend { meta, endpoint }) => {
                if !self.fits(&key, &meta) {
                    tracing::warn!(backend = %meta.id, weight = meta.weight, "discovery inserted a backend that would take the ring past its point limit; ignored");
                    return;
                }
                if let Some(other) = self
                    .entries
                    .iter()
                    .find(|e| e.key != key && e.meta.id == meta.id)
                {
                    tracing::warn!(backend = %other.meta.id, "discovery inserted a backend ID already in use under another key; ignored");
                    return;
                }
                let (policy, fleet) = (&self.config.breaker, &self.fleet);
                match self.entries.iter_mut().find(|e| e.key == key) {
                    Some(entry) => {
                        if entry.meta.id != meta.id {
                            entry.state.removed.store(true, Ordering::Relaxed);
                            entry.state = new_state(&meta, policy, fleet);
                        } else {
                            let residency = &entry.state.residency;
                            residency.set_slots(meta.model_slots);
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
                        let state = new_state(&meta, policy, fleet);
                        tracing::debug!(backend = %meta.id, "backend inserted");
                        self.entries.push(Entry {
                            key,
                            meta,
                            endpoint,
                            state,
                        });
                    }
                }
            }
            Change::Remove(key) => {
                if let Some(pos) = self.entries.iter().position(|e| e.key == key) {
                    let entry = self.entries.swap_remove(pos);
                    // Ineligible at once, also in snapshots still in use;
                    // requests in flight there finish normally.
                    entry.state.removed.store(true, Ordering::Relaxed);
                    tracing::debug!(backend = %entry.meta.id, "backend removed");
                }
            }
        }
    }

    /// Whether the ring still fits in its point limit with `meta` inserted
    /// under `key` (replacing what the key held).
    fn fits(&self, key: &K, meta: &BackendMeta) -> bool {
        let vnodes = self.config.ring.vnodes_per_weight().max(1) as usize;
        let points = |weight: u32| (weight as usize).saturating_mul(vnodes);
        let others: usize = self
            .entries
            .iter()
            .filter(|e| &e.key != key)
            .map(|e| points(e.meta.weight))
            .fold(0, usize::saturating_add);
        others.saturating_add(points(meta.weight)) <= MAX_POINTS
    }

    /// Builds the snapshot of the current entries.
    pub(crate) fn snapshot(&self) -> Snapshot<E> {
        let members = self
            .entries
            .iter()
            .map(|e| (e.meta.id.clone(), e.meta.weight));
        let ring = match Ring::build(&self.config.ring, members) {
            Ok(ring) => ring,
            Err(error) => {
                // IDs are unique, weights valid and the point total bounded
                // (all checked on insert): not reached. Rather than panic,
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

fn new_state(meta: &BackendMeta, policy: &Policy, fleet: &Arc<Fleet>) -> Arc<BackendState> {
    let state = BackendState::new(
        meta.id.clone(),
        policy.clone(),
        fleet.clone(),
        meta.model_slots,
    );
    let now = fleet.millis(tokio::time::Instant::now());
    let keys = meta.resident_models.iter().map(|m| m.hash64());
    state.residency.replace(keys, now);
    Arc::new(state)
}

/// Drives `discover` until it ends or every balancer clone is gone,
/// publishing a snapshot after each batch of changes.
pub(crate) async fn run<D, K, E>(
    mut discover: Pin<Box<D>>,
    mut registry: Registry<K, E>,
    shared: Weak<Shared<E>>,
) where
    D: Discover<Key = K, Service = Backend<E>>,
    D::Error: Into<BoxError>,
    K: Eq,
    E: Clone,
{
    loop {
        let drained = poll_fn(|cx| match registry.drain(discover.as_mut(), cx) {
            Drained::Pending { changed: false } => Poll::Pending,
            other => Poll::Ready(other),
        })
        .await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        shared.publish(registry.snapshot());
        if drained == Drained::Done {
            return;
        }
    }
}
