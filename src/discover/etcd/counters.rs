//! An etcd source's [`EtcdHandle`] and [`EtcdStats`].

use std::fmt;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

/// A cheap, cloneable handle on an [`Etcd`](super::Etcd) source's
/// counters ([`Etcd::handle`](super::Etcd::handle)), readable after the
/// source was handed to a balancer.
#[derive(Clone, Default)]
pub struct EtcdHandle {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    revision: AtomicI64,
    events: AtomicU64,
    snapshots: AtomicU64,
    resumes: AtomicU64,
    compactions: AtomicU64,
    invalid: AtomicU64,
    stale: AtomicU64,
}

/// What an [`Etcd`](super::Etcd) source counted, read by
/// [`EtcdHandle::stats`]. Each counter starts at 0 and only grows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EtcdStats {
    /// The etcd revision the source's announced backends are at: every
    /// change up to it has been yielded to the balancer (0 before the
    /// first snapshot).
    pub revision: i64,
    /// Events (puts and deletes under the prefix, lease expiries among
    /// them) applied.
    pub events: u64,
    /// Snapshots read: the first, and one after each compaction.
    pub snapshots: u64,
    /// Watches re-created after a break (connection lost, etcd restarted,
    /// watch cancelled), each from the revision after the last applied:
    /// counted once etcd has created the watch, not per failed attempt.
    pub resumes: u64,
    /// Resumes that etcd refused because their revision was compacted,
    /// each followed by a fresh snapshot.
    pub compactions: u64,
    /// Values that did not decode as a backend record (or keys that name
    /// no backend): each such backend is out of the fleet until its record
    /// is valid again.
    pub invalid_records: u64,
    /// Events at or below the revision already applied, dropped: a replay.
    /// Resuming after the last applied revision means this stays 0; it is
    /// the check that it does.
    pub stale_events: u64,
}

impl EtcdHandle {
    /// The counters now, each read once; `revision` first (acquire), so
    /// the events counted are at least those up to it.
    pub fn stats(&self) -> EtcdStats {
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let inner = &self.inner;
        EtcdStats {
            revision: inner.revision.load(Ordering::Acquire),
            events: read(&inner.events),
            snapshots: read(&inner.snapshots),
            resumes: read(&inner.resumes),
            compactions: read(&inner.compactions),
            invalid_records: read(&inner.invalid),
            stale_events: read(&inner.stale),
        }
    }

    pub(super) fn set_revision(&self, revision: i64) {
        self.inner.revision.store(revision, Ordering::Release);
    }

    pub(super) fn add_outcome(&self, events: u64, invalid: u64, stale: u64) {
        self.inner.events.fetch_add(events, Ordering::Relaxed);
        self.inner.invalid.fetch_add(invalid, Ordering::Relaxed);
        self.inner.stale.fetch_add(stale, Ordering::Relaxed);
    }

    pub(super) fn add_snapshot(&self) {
        self.inner.snapshots.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn add_resume(&self) {
        self.inner.resumes.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn add_compaction(&self) {
        self.inner.compactions.fetch_add(1, Ordering::Relaxed);
    }
}

impl fmt::Debug for EtcdHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("EtcdHandle").field(&self.stats()).finish()
    }
}
