//! [`DiscoverHandle`] and [`DiscoverStats`]: what a discovery source
//! counts, readable after the source was handed to a balancer.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A cheap, cloneable handle on a discovery source's counters
/// ([`Dns::handle`](super::Dns::handle), [`Watch::handle`](super::Watch::handle)),
/// readable after the source was handed to a balancer, as
/// [`BalancerHandle`](crate::balance::BalancerHandle) reads the balancer.
#[derive(Clone, Default)]
pub struct DiscoverHandle {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    duplicates: AtomicU64,
    resolutions: AtomicU64,
    failures: AtomicU64,
    empty: AtomicU64,
}

/// What a discovery source counted, read by [`DiscoverHandle::stats`].
/// Every counter starts at 0 and only grows (wrapping after 2^64).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DiscoverStats {
    /// Backends dropped because an earlier one in the same published set
    /// had their ID ([`Watch`](super::Watch)).
    pub duplicates: u64,
    /// Resolutions that returned an answer, empty or not (`Dns`).
    pub resolutions: u64,
    /// Resolutions that failed or timed out, each leaving the backend set
    /// as it was (`Dns`).
    pub failures: u64,
    /// Resolutions that answered no address (`Dns`); also counted in
    /// `resolutions`.
    pub empty_answers: u64,
}

impl DiscoverHandle {
    /// The counters now, each read once (relaxed: a counter may be a
    /// moment ahead of another).
    pub fn stats(&self) -> DiscoverStats {
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        DiscoverStats {
            duplicates: read(&self.inner.duplicates),
            resolutions: read(&self.inner.resolutions),
            failures: read(&self.inner.failures),
            empty_answers: read(&self.inner.empty),
        }
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

impl fmt::Debug for DiscoverHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("DiscoverHandle")
            .field(&self.stats())
            .finish()
    }
}
