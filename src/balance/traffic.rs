//! A backend's in-flight count and pick counter in one atomic word: a pick
//! costs one read-modify-write instead of two (each is about 10 ns, the
//! largest single cost of a pick after the request's own parsing).

use std::sync::atomic::{AtomicU64, Ordering};

/// Low bits: requests in flight; high bits: requests ever picked.
const IN_FLIGHT_BITS: u32 = 24;
const IN_FLIGHT_MASK: u64 = (1 << IN_FLIGHT_BITS) - 1;
/// One more request picked and in flight.
const START: u64 = (1 << IN_FLIGHT_BITS) | 1;

/// Requests in flight on one backend (up to 2^24 − 1, about 16.7 million
/// at once) and picked there since it joined (wrapping after 2^40, about a
/// trillion).
#[derive(Debug, Default)]
pub(crate) struct Traffic(AtomicU64);

impl Traffic {
    /// A request was picked here and is now in flight.
    pub(crate) fn start(&self) {
        self.0.fetch_add(START, Ordering::Relaxed);
    }

    /// A request picked here finished.
    pub(crate) fn end(&self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn in_flight(&self) -> usize {
        (self.0.load(Ordering::Relaxed) & IN_FLIGHT_MASK) as usize
    }

    pub(crate) fn picked(&self) -> u64 {
        self.0.load(Ordering::Relaxed) >> IN_FLIGHT_BITS
    }

    /// Sets the in-flight count to `load`, keeping the pick counter (tests).
    #[cfg(test)]
    pub(crate) fn set_in_flight(&self, load: usize) -> usize {
        let old = self.in_flight();
        let picked = self.picked() << IN_FLIGHT_BITS;
        self.0.store(picked | load as u64, Ordering::Relaxed);
        old
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_in_flight_and_picks_apart() {
        let t = Traffic::default();
        for _ in 0..3 {
            t.start();
        }
        t.end();
        assert_eq!((t.in_flight(), t.picked()), (2, 3));
        t.end();
        t.end();
        assert_eq!((t.in_flight(), t.picked()), (0, 3), "no borrow from picks");
        assert_eq!(t.set_in_flight(7), 0);
        assert_eq!((t.in_flight(), t.picked()), (7, 3));
    }
}
