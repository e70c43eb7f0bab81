//! The time of one pick, read from Tokio's clock only if a step needs it.
//!
//! On the common path — a resident owner with its breaker closed — no step
//! does: the clock read (about 20 ns, as much as the rest of a pick's
//! arithmetic) is paid by the requests sampled for latency and recency,
//! and by the ones that load, spill, or meet a breaker that is not closed.

use std::cell::Cell;

use tokio::time::Instant;

/// A lazily read instant, the same for every step of one pick.
#[derive(Debug)]
pub(crate) struct Now(Cell<Option<Instant>>);

impl Now {
    /// Reads the clock on first use.
    pub(crate) fn lazy() -> Self {
        Self(Cell::new(None))
    }

    /// Fixed at `at` (the pick API's caller gives the time).
    pub(crate) fn at(at: Instant) -> Self {
        Self(Cell::new(Some(at)))
    }

    /// The instant, read now if no step read it before.
    pub(crate) fn get(&self) -> Instant {
        match self.0.get() {
            Some(at) => at,
            None => {
                let at = Instant::now();
                self.0.set(Some(at));
                at
            }
        }
    }

    /// The instant if it was read (or given) already.
    pub(crate) fn read(&self) -> Option<Instant> {
        self.0.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn reads_once_on_first_use() {
        let now = Now::lazy();
        assert_eq!(now.read(), None);
        let first = now.get();
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        assert_eq!(now.get(), first, "the same instant for every step");
        assert_eq!(now.read(), Some(first));
        let given = Instant::now();
        assert_eq!(Now::at(given).read(), Some(given));
    }
}
