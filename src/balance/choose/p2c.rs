//! P2C's choice: the cheaper of two eligible backends (Mitzenmacher,
//! 2001), as tower's and linkerd's balancers make it — the two sampled
//! uniformly ([`sample2`]), then compared by trial, health floor and cost
//! ([`Ctx::choose2`]).

use std::cmp::Ordering;

use crate::balance::choose::ctx::{Ctx, Mode};
use crate::balance::mix::mix;
use crate::balance::state::cost::{at_floor, compare};

impl Ctx<'_> {
    /// Power of two choices on cost over `set`: two distinct members
    /// sampled uniformly, then [`Ctx::choose2`].
    pub(crate) fn p2c(&self, set: &[usize], random: &mut impl FnMut() -> u64) -> Option<usize> {
        match set.len() {
            0 => None,
            1 => Some(set[0]),
            2 => Some(self.choose2(set[0], set[1], random)),
            n => {
                let [a, b] = sample2(n as u64, random);
                Some(self.choose2(set[a], set[b], random))
            }
        }
    }

    /// P2C's choice between eligible `a` and `b`, as tower's and
    /// linkerd's P2C (Mitzenmacher, 2001): the cheaper of the two.
    ///
    /// In order: a backend to try first ([`Ctx::first`]: a half-open
    /// breaker's probe, a backend just back from unhealthy); a backend
    /// above the health floor over one at it (a backend at health 0 gets
    /// nothing while its rival is healthy, however loaded the rival);
    /// else the lower cost ([`cost`]), costs within [`TIE`] of each other
    /// a tie broken at random ([`compare`]).
    ///
    /// With as many in flight on each (both idle, at light load) the
    /// costs differ by latency estimate and health alone, and the
    /// cheaper takes the request: a backend 20% slower than its rival
    /// gets none by chance, only the refreshes below. What keeps a backend that
    /// served slowly once from being priced out for good is its
    /// estimate's relaxation toward the others' median while it is idle
    /// ([`BalanceConfigBuilder::latency_decay`]): once within the tie
    /// band it draws requests again, and their answers refresh it. Two
    /// backends serving alike hold estimates within the band and split
    /// the requests evenly (issue 39); a backend that rejoins starts at
    /// the median (a tie), its warm-up ramp weighing only its queue
    /// ([`cost`]); one readmitted by health is tried at once.
    ///
    /// In panic mode the cost is no guide (every health score is at the
    /// floor, every estimate full of failure penalties): fewer in flight,
    /// else uniformly at random.
    ///
    /// [`cost`]: crate::balance::state::cost::cost
    /// [`TIE`]: crate::balance::state::cost::TIE
    /// [`compare`]: crate::balance::state::cost::compare
    /// [`BalanceConfigBuilder::latency_decay`]: crate::balance::BalanceConfigBuilder::latency_decay
    pub(crate) fn choose2(&self, a: usize, b: usize, random: &mut impl FnMut() -> u64) -> usize {
        let (first_a, first_b) = (self.first(a), self.first(b));
        if first_a != first_b {
            return if first_a { a } else { b };
        }
        let (sa, sb) = (self.state(a), self.state(b));
        let order = match self.mode {
            Mode::Panic => sa.load().cmp(&sb.load()),
            Mode::Normal => {
                let floor_a = at_floor(sa.health.score.get());
                let floor_b = at_floor(sb.health.score.get());
                floor_a
                    .cmp(&floor_b)
                    .then_with(|| compare(sa.cost(), sb.cost()))
            }
        };
        match order {
            Ordering::Less => a,
            Ordering::Greater => b,
            Ordering::Equal if mix(random()) & 1 == 0 => a,
            Ordering::Equal => b,
        }
    }
}

/// Two distinct indices in `0..n` (`n >= 2`), uniformly (Floyd's
/// combination algorithm for two).
pub(crate) fn sample2(n: u64, random: &mut impl FnMut() -> u64) -> [usize; 2] {
    let a = random() % (n - 1);
    let b = random() % n;
    let a = if a == b { n - 1 } else { a };
    [a as usize, b as usize]
}
