//! Request counts kept so that a pick costs as few read-modify-writes as
//! possible (each is about 10 ns, the largest single cost of a pick after
//! the request's own parsing): a backend's in-flight count and pick counter
//! share one atomic word, and the fleet's requests in flight are its
//! requests picked (counted by branch anyway) minus those finished.

use std::sync::atomic::Ordering;

use crate::sync::AtomicU64;

/// Low bits: requests in flight; high bits: requests ever picked.
/// Which branch a pick took; counted in [`BalanceStats`](crate::balance::BalanceStats).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub(crate) enum Branch {
    /// An inference request went to an owner with its model resident.
    ResidentOwner,
    /// An inference request went to an owner that must load its model.
    ColdOwner,
    /// Every owner was out; the request went further along the ring.
    Spill,
    /// Too few backends were eligible; the request was routed over all.
    Panic,
    /// An inference request went to the backend holding the most of its
    /// prompt's cached blocks (feature `kv-events`).
    CachedBlocks,
    /// An update went to the cheaper of two sampled backends.
    Update,
}

impl Branch {
    /// How many branches there are (`Update` is the last).
    pub(crate) const COUNT: usize = Branch::Update as usize + 1;
}

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
    #[inline]
    pub(crate) fn start(&self) {
        self.0.fetch_add(START, Ordering::Relaxed);
    }

    /// A request picked here finished.
    #[inline]
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

/// Requests picked over the whole fleet, by branch, and requests
/// finished: the fleet's in-flight count without a counter of its own.
#[derive(Debug, Default)]
pub(crate) struct FleetTraffic {
    picked: [AtomicU64; Branch::COUNT],
    finished: AtomicU64,
}

impl FleetTraffic {
    /// A request was picked by `branch` and is now in flight.
    #[inline]
    pub(crate) fn start(&self, branch: Branch) {
        self.picked[branch as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// A picked request finished.
    #[inline]
    pub(crate) fn end(&self) {
        self.finished.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests picked by `branch` so far.
    pub(crate) fn picked(&self, branch: Branch) -> u64 {
        self.picked[branch as usize].load(Ordering::Relaxed)
    }

    /// Requests in flight over the fleet. Exact when no pick or finish
    /// races the read; a racing one may show or not.
    pub(crate) fn in_flight(&self) -> usize {
        // Finished first: what it counts had started before.
        let finished = self.finished.load(Ordering::Acquire);
        let picked: u64 = self.picked.iter().map(|p| p.load(Ordering::Relaxed)).sum();
        picked.saturating_sub(finished) as usize
    }

    /// Adds `started` picks and `finished` finishes (tests: a load).
    #[cfg(test)]
    pub(crate) fn shift(&self, started: u64, finished: u64) {
        self.picked[0].fetch_add(started, Ordering::Relaxed);
        self.finished.fetch_add(finished, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fleet_in_flight_is_picked_minus_finished() {
        let f = FleetTraffic::default();
        f.start(Branch::ResidentOwner);
        f.start(Branch::Update);
        f.start(Branch::Update);
        assert_eq!(f.in_flight(), 3);
        f.end();
        assert_eq!(f.in_flight(), 2);
        assert_eq!((f.picked(Branch::Update), f.picked(Branch::Spill)), (2, 0));
    }

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
