//! The bounds on placement's loads (pure logic: takes `now`, no IO): how
//! many loads may run or wait on one backend at once, and how soon one
//! model may load again on one backend.
//!
//! Why both: a load is the most expensive thing a request can make a model
//! server do (seconds to minutes of GPU memory traffic), and the one a
//! client controls by the model name it sends. The allow-list (the
//! backend's repository index) keeps a name it does not list from loading
//! at all; these keep the names it does list from queueing more loads
//! behind one backend's turn than could run within the load timeout, and
//! from making the server load, evict and reload one model in a loop.
//! The first bound refuses (a request past it fails at once); the second
//! delays (a request that needs the model sooner waits for the gap, on
//! its own future: no task, no entry), so that eviction churn in an
//! ordinary workload costs time, not errors.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

/// The most loads running or waiting for their turn on one backend. A
/// backend loads one model at a time, so past a few the ones at the back
/// would time out anyway; a request that would start another fails at
/// once. Running loads are so at most this × the backends.
pub(crate) const MAX_LOADS_PER_BACKEND: usize = 8;
/// The least time between two load starts of one model on one backend.
pub(crate) const LOAD_GAP: Duration = Duration::from_secs(2);
/// The most (backend, model) pairs remembered; past it, those whose gap
/// has passed go, and while it stays full a new pair starts no load (each
/// entry is 24 bytes: 1.5 MiB at most). Only models a repository lists
/// reach here, and an entry lives [`LOAD_GAP`].
pub(crate) const MAX_PAIRS: usize = 65_536;

/// Why a load may not start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limited {
    /// [`MAX_LOADS_PER_BACKEND`] loads run or wait on the backend.
    Busy,
    /// The model started a load there less than [`LOAD_GAP`] ago: not
    /// before this instant.
    TooSoon(Instant),
    /// [`MAX_PAIRS`] pairs are tracked and none has passed its gap.
    Full,
}

impl Limited {
    /// The reason the waiting requests read.
    pub(crate) fn reason(self) -> String {
        match self {
            Limited::Busy => {
                format!("{MAX_LOADS_PER_BACKEND} loads already running or queued on this backend")
            }
            Limited::TooSoon(_) => format!(
                "loaded on this backend less than {}s ago: not loaded again yet",
                LOAD_GAP.as_secs()
            ),
            Limited::Full => "too many models loading across the fleet".to_owned(),
        }
    }
}

/// When each (backend uid, model hash) last started a load.
#[derive(Debug, Default)]
pub(crate) struct LoadRate {
    started: HashMap<(u64, u64), Instant>,
}

impl LoadRate {
    /// Takes one load start of `slot` at `now`, or says why not. `running`:
    /// the loads running or queued on the slot's backend now.
    pub(crate) fn take(
        &mut self,
        slot: (u64, u64),
        running: usize,
        now: Instant,
    ) -> Result<(), Limited> {
        if running >= MAX_LOADS_PER_BACKEND {
            return Err(Limited::Busy);
        }
        if let Some(&at) = self.started.get(&slot) {
            if now < at + LOAD_GAP {
                return Err(Limited::TooSoon(at + LOAD_GAP));
            }
        } else if self.started.len() >= MAX_PAIRS {
            self.started.retain(|_, at| now < *at + LOAD_GAP);
            if self.started.len() >= MAX_PAIRS {
                return Err(Limited::Full);
            }
        }
        self.started.insert(slot, now);
        Ok(())
    }

    /// The pairs tracked now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.started.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_loads_at_most_once_per_gap_on_a_backend() {
        let t0 = Instant::now();
        let mut rate = LoadRate::default();
        assert_eq!(rate.take((1, 7), 0, t0), Ok(()));
        let soon = t0 + LOAD_GAP - Duration::from_millis(1);
        assert_eq!(
            rate.take((1, 7), 0, soon),
            Err(Limited::TooSoon(t0 + LOAD_GAP))
        );
        assert_eq!(rate.take((2, 7), 0, t0), Ok(()), "another backend");
        assert_eq!(rate.take((1, 8), 0, t0), Ok(()), "another model");
        assert_eq!(rate.take((1, 7), 0, t0 + LOAD_GAP), Ok(()), "past the gap");
    }

    #[test]
    fn a_busy_backend_starts_nothing_more() {
        let mut rate = LoadRate::default();
        let now = Instant::now();
        assert_eq!(
            rate.take((1, 7), MAX_LOADS_PER_BACKEND, now),
            Err(Limited::Busy)
        );
        assert_eq!(rate.len(), 0, "nothing taken");
        assert_eq!(rate.take((1, 7), MAX_LOADS_PER_BACKEND - 1, now), Ok(()));
    }

    #[test]
    fn the_pairs_are_bounded_and_those_past_their_gap_make_room() {
        let t0 = Instant::now();
        let mut rate = LoadRate::default();
        for key in 0..MAX_PAIRS as u64 {
            assert_eq!(rate.take((1, key), 0, t0), Ok(()));
        }
        assert_eq!(rate.take((2, 0), 0, t0), Err(Limited::Full));
        assert_eq!(rate.len(), MAX_PAIRS);
        assert_eq!(rate.take((2, 0), 0, t0 + LOAD_GAP), Ok(()));
        assert_eq!(rate.len(), 1, "the old ones went");
    }
}
