//! An etcd source's counters.

use std::fmt;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

/// A cheap, cloneable handle on an [`Etcd`](super::Etcd) source's
/// counters, readable after the source was handed to a balancer. Each
/// counter starts at 0 and only grows.
#[derive(Clone, Default)]
pub struct EtcdCounters {
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

impl EtcdCounters {
    /// The etcd revision the source's announced backends are at: every
    /// change up to it has been yielded to the balancer (0 before the
    /// first snapshot).
    pub fn revision(&self) -> i64 {
        self.inner.revision.load(Ordering::Acquire)
    }

    /// Events (puts and deletes under the prefix, lease expiries among
    /// them) applied.
    pub fn events(&self) -> u64 {
        self.inner.events.load(Ordering::Relaxed)
    }

    /// Snapshots read: the first, and one after each compaction.
    pub fn snapshots(&self) -> u64 {
        self.inner.snapshots.load(Ordering::Relaxed)
    }

    /// Watches re-created after a break (connection lost, etcd restarted,
    /// watch cancelled), each from the revision after the last applied:
    /// counted once etcd has created the watch, not per failed attempt.
    pub fn resumes(&self) -> u64 {
        self.inner.resumes.load(Ordering::Relaxed)
    }

    /// Resumes that etcd refused because their revision was compacted,
    /// each followed by a fresh snapshot.
    pub fn compactions(&self) -> u64 {
        self.inner.compactions.load(Ordering::Relaxed)
    }

    /// Values that did not decode as a backend record (or keys that name
    /// no backend): each such backend is out of the fleet until its record
    /// is valid again.
    pub fn invalid_records(&self) -> u64 {
        self.inner.invalid.load(Ordering::Relaxed)
    }

    /// Events at or below the revision already applied, dropped: a replay.
    /// Resuming after the last applied revision means this stays 0; it is
    /// the check that it does.
    pub fn stale_events(&self) -> u64 {
        self.inner.stale.load(Ordering::Relaxed)
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

impl fmt::Debug for EtcdCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdCounters")
            .field("revision", &self.revision())
            .field("events", &self.events())
            .field("snapshots", &self.snapshots())
            .field("resumes", &self.resumes())
            .field("compactions", &self.compactions())
            .field("invalid_records", &self.invalid_records())
            .field("stale_events", &self.stale_events())
            .finish()
    }
}
