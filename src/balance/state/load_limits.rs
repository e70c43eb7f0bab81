//! The bounds on placement's loads (pure logic: takes `now`, no IO): how
//! many loads may run or wait on one backend at once, and how often one
//! model may start a load on one backend.
//!
//! Why both: a load is the most expensive thing a request can make a model
//! server do (seconds to minutes of GPU memory traffic), and the one a
//! client controls by the model name it sends. The allow-list (the
//! backend's repository index) keeps a name it does not list from loading
//! at all; these keep the names it does list from being used to make the
//! server thrash — load a model, evict it for another, load it again —
//! or to queue more loads behind one backend's turn than could run within
//! the load timeout.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

/// The most loads running or waiting for their turn on one backend. A
/// backend loads one model at a time, so past a few the ones at the back
/// would time out anyway; a request that would start another fails at
/// once. Running loads are so at most this × the backends.
pub(crate) const MAX_LOADS_PER_BACKEND: usize = 8;
/// The most loads one model starts on one backend within [`LOAD_WINDOW`].
pub(crate) const LOADS_PER_WINDOW: u32 = 3;
/// The window of [`LOADS_PER_WINDOW`]: a model that needed more loads on
/// one backend than that within a minute is thrashing there.
pub(crate) const LOAD_WINDOW: Duration = Duration::from_secs(60);
/// The most (backend, model) windows remembered; past it, those expired
/// go, and while it stays full a new pair starts no load (each entry is
/// 32 bytes: 2 MiB at most). Only models a repository lists reach here.
pub(crate) const MAX_WINDOWS: usize = 65_536;

/// Why a load may not start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limited {
    /// [`MAX_LOADS_PER_BACKEND`] loads run or wait on the backend.
    Busy,
    /// The model started [`LOADS_PER_WINDOW`] loads there within the last
    /// [`LOAD_WINDOW`].
    TooOften,
    /// [`MAX_WINDOWS`] pairs are tracked and none has expired.
    Full,
}

impl Limited {
    /// The reason the waiting requests read.
    pub(crate) fn reason(self) -> String {
        match self {
            Limited::Busy => format!(
                "{MAX_LOADS_PER_BACKEND} loads already running or queued on this backend"
            ),
            Limited::TooOften => format!(
                "{LOADS_PER_WINDOW} loads of this model on this backend within {}s: not loaded again yet",
                LOAD_WINDOW.as_secs()
            ),
            Limited::Full => "too many models loading across the fleet".to_owned(),
        }
    }
}

/// Load starts per (backend uid, model hash): the window's start and the
/// loads started in it.
#[derive(Debug, Default)]
pub(crate) struct LoadRate {
    windows: HashMap<(u64, u64), (Instant, u32)>,
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
        let expired = |at: Instant| now.saturating_duration_since(at) >= LOAD_WINDOW;
        if let Some((start, count)) = self.windows.get_mut(&slot) {
            if expired(*start) {
                (*start, *count) = (now, 1);
                return Ok(());
            }
            if *count >= LOADS_PER_WINDOW {
                return Err(Limited::TooOften);
            }
            *count += 1;
            return Ok(());
        }
        if self.windows.len() >= MAX_WINDOWS {
            self.windows.retain(|_, (start, _)| !expired(*start));
            if self.windows.len() >= MAX_WINDOWS {
                return Err(Limited::Full);
            }
        }
        self.windows.insert(slot, (now, 1));
        Ok(())
    }

    /// The pairs tracked now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.windows.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_starts_three_loads_a_minute_on_a_backend() {
        let t0 = Instant::now();
        let mut rate = LoadRate::default();
        for _ in 0..LOADS_PER_WINDOW {
            assert_eq!(rate.take((1, 7), 0, t0), Ok(()));
        }
        assert_eq!(rate.take((1, 7), 0, t0), Err(Limited::TooOften));
        let later = t0 + LOAD_WINDOW - Duration::from_millis(1);
        assert_eq!(rate.take((1, 7), 0, later), Err(Limited::TooOften));
        assert_eq!(rate.take((2, 7), 0, t0), Ok(()), "another backend");
        assert_eq!(rate.take((1, 8), 0, t0), Ok(()), "another model");
        assert_eq!(
            rate.take((1, 7), 0, t0 + LOAD_WINDOW),
            Ok(()),
            "a new window"
        );
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
    fn the_windows_are_bounded_and_expired_ones_make_room() {
        let t0 = Instant::now();
        let mut rate = LoadRate::default();
        for key in 0..MAX_WINDOWS as u64 {
            assert_eq!(rate.take((1, key), 0, t0), Ok(()));
        }
        assert_eq!(rate.take((2, 0), 0, t0), Err(Limited::Full));
        assert_eq!(rate.len(), MAX_WINDOWS);
        assert_eq!(rate.take((2, 0), 0, t0 + LOAD_WINDOW), Ok(()));
        assert_eq!(rate.len(), 1, "the expired ones went");
    }
}
