//! Staged ring changes (pure logic): how many points each member holds
//! after the next step.
//!
//! Why stage: consistent hashing moves only the keys a change touches, but
//! when several backends join at once that is still their whole share of
//! the models, at once — and every moved model is a cold load on its new
//! owner (seconds for an LLM), while the old owners drop warm traffic. The
//! original design note asks for ring changes "one group at a time with a
//! cooldown". So the registry keeps, for each member, the points the ring
//! in force gives it (`current`) and the points its weight calls for
//! (`target`), and moves from one to the other in steps.
//!
//! A step changes at most `budget = max(1, ceil(max_share × T))` points,
//! `T` being the points of the ring in force. Adding `p` points to a ring of
//! `T` gives them about `p / (T + p)` of the keys, and removing `p` takes
//! about `p / T`: either way a step moves at most about `max_share` of the
//! models. (Measured against the ring being left, not the target: from 8
//! backends to 12, a budget of 10% of the target's points would move 13% of
//! the models in the first step.)
//!
//! The budget is shared among the members in proportion to how far each is
//! from its target — rounded down, the points left over going one each to
//! the largest remainders, ties by ID bytes — so backends joining together
//! warm up together, each taking a part of its models per step, instead of
//! one taking all of its models at once; and the result depends only on the
//! members' IDs and counts, not on their order. A member's `current` always
//! lies between where it started and its target.
//!
//! Nothing is staged when the ring in force has no points (there is nothing
//! to move away from: the balancer's first backend set) or when `max_share`
//! is 1.0. Otherwise every step that does not finish moves exactly `budget`
//! points closer to the target, so a change converges: in `D / budget`
//! steps when the ring keeps its size (`D` the sum of the distances), and in
//! about `ln(T_target / T) / ln(1 + max_share)` steps when it grows, since
//! each step grows the ring, and the next budget, by `max_share`.

use crate::backend::BackendId;

/// One member's point counts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Counts<'a> {
    pub(crate) id: &'a BackendId,
    /// Points held in the ring in force.
    pub(crate) current: u32,
    /// Points its weight calls for.
    pub(crate) target: u32,
}

impl Counts<'_> {
    fn distance(&self) -> u64 {
        u64::from(self.current.abs_diff(self.target))
    }
}

/// Whether every member holds its target.
pub(crate) fn settled(members: &[Counts<'_>]) -> bool {
    members.iter().all(|m| m.current == m.target)
}

/// The points each member holds after the next step, in input order.
pub(crate) fn step(members: &[Counts<'_>], max_share: f64) -> Vec<u32> {
    let total: u64 = members.iter().map(|m| u64::from(m.current)).sum();
    let distance: u64 = members.iter().map(Counts::distance).sum();
    let budget = budget(total, max_share);
    if total == 0 || max_share >= 1.0 || distance <= budget {
        return members.iter().map(|m| m.target).collect();
    }
    // budget < distance: each member's part is below its distance.
    let wide = u128::from(distance);
    let part = |m: &Counts<'_>| u128::from(m.distance()) * u128::from(budget);
    let mut moves: Vec<u64> = members.iter().map(|m| (part(m) / wide) as u64).collect();
    let left = budget - moves.iter().sum::<u64>();
    let mut order: Vec<usize> = (0..members.len())
        .filter(|&i| members[i].distance() > 0)
        .collect();
    let remainder = |i: usize| part(&members[i]) % wide;
    order.sort_unstable_by(|&a, &b| {
        remainder(b)
            .cmp(&remainder(a))
            .then_with(|| members[a].id.cmp(members[b].id))
    });
    // Fewer points are left than members with a remainder, and each of
    // those has room for one more.
    for &i in order.iter().take(left as usize) {
        moves[i] += 1;
    }
    members
        .iter()
        .zip(moves)
        .map(|(m, moved)| {
            let moved = moved as u32;
            if m.target > m.current {
                m.current + moved
            } else {
                m.current - moved
            }
        })
        .collect()
}

/// `max(1, ceil(max_share × total))`, with `max_share` taken to a
/// millionth and the product in integers (so `0.1 × 30` is 3, not the 4 a
/// float's `3.0000000000000004` would round up to).
pub(super) fn budget(total: u64, max_share: f64) -> u64 {
    const PPM: u128 = 1_000_000;
    let share = (max_share.clamp(0.0, 1.0) * PPM as f64).round() as u128;
    let points = (share * u128::from(total)).div_ceil(PPM);
    (points as u64).max(1)
}

#[cfg(test)]
mod tests;
