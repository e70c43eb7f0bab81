//! [`Counters`]: what a discovery source counts, readable after the source
//! was handed to a balancer.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A cheap, cloneable handle on a discovery source's counters, readable
/// after the source was handed to a balancer. Every counter starts at 0
/// and only grows (wrapping after 2^64).
#[derive(Clone, Default)]
pub struct Counters {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    duplicates: AtomicU64,
    resolutions: AtomicU64,
    failures: AtomicU64,
    empty: AtomicU64,
}

impl Counters {
    /// Backends dropped because an earlier one in the same published set
    /// had their ID ([`Watch`](super::Watch)).
    pub fn duplicates(&self) -> u64 {
        self.inner.duplicates.load(Ordering::Relaxed)
    }

    /// Resolutions that returned an answer, empty or not (`Dns`).
    pub fn resolutions(&self) -> u64 {
        self.inner.resolutions.load(Ordering::Relaxed)
    }

    /// Resolutions that failed or timed out, each leaving the backend set
    /// as it was (`Dns`).
    pub fn failures(&self) -> u64 {
        self.inner.failures.load(Ordering::Relaxed)
    }

    /// Resolutions that answered no address (`Dns`); also counted in
    /// [`Counters::resolutions`].
    pub fn empty_answers(&self) -> u64 {
        self.inner.empty.load(Ordering::Relaxed)
    }

    pub(super) fn add_duplicates(&self, n: usize) {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        self.inner.duplicates.fetch_add(n, Ordering::Relaxed);
    }

    #[cfg(feature = "dns")]
    pub(super) fn add_resolution(&self, empty: bool) {
        self.inner.resolutions.fetch_add(1, Ordering::Relaxed);
        if empty {
            self.inner.empty.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[cfg(feature = "dns")]
    pub(super) fn add_failure(&self) {
        self.inner.failures.fetch_add(1, Ordering::Relaxed);
    }
}

impl fmt::Debug for Counters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counters")
            .field("duplicates", &self.duplicates())
            .field("resolutions", &self.resolutions())
            .field("failures", &self.failures())
            .field("empty_answers", &self.empty_answers())
            .finish()
    }
}
