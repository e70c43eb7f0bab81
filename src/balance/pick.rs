//! Choosing a backend for one request from a table (no IO, no locks but the
//! breaker's on its non-closed paths).

use tokio::time::Instant;

use super::table::Table;
use crate::breaker::Permit;
use crate::route::RequestKind;

/// Which branch a pick took; counted in [`BalanceStats`](super::BalanceStats).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Branch {
    /// An inference request went to one of its model's `k` owners.
    Owner,
    /// Every owner was out; the request went further along the ring.
    Spill,
    /// An update went to the better of two sampled backends.
    Update,
}

/// A chosen backend with its breaker permit.
#[derive(Debug)]
pub(crate) struct Pick {
    pub(crate) index: usize,
    pub(crate) permit: Permit,
    pub(crate) branch: Branch,
}

/// Picks a backend for a request of `kind` for the model with hash `key`,
/// or `None` when no backend admits it. `owners` is how many owners the
/// model has now (inference only); `c` the bounded-load factor.
pub(crate) fn pick(
    table: &Table,
    kind: RequestKind,
    key: u64,
    owners: usize,
    c: f64,
    now: Instant,
    random: &mut impl FnMut() -> u64,
) -> Option<Pick> {
    match kind {
        RequestKind::Update => pick_update(table, now, random),
        _ => pick_inference(table, key, owners, c, now),
    }
}

/// The bounded-load cap: `ceil(c × (total in-flight + 1) / n)`.
pub(crate) fn load_cap(table: &Table, c: f64) -> usize {
    let n = table.backends.len().max(1) as f64;
    (c * (table.fleet_load() + 1) as f64 / n).ceil() as usize
}

/// Among the model's first `k` owners whose breakers admit: the first under
/// the bounded-load cap (so each model stays on its primary while it has
/// room), else the least loaded (the earlier on ties). When no owner
/// admits, the request spills along the ring: to the first admitting
/// backend under the cap, else to the first admitting one.
fn pick_inference(table: &Table, key: u64, k: usize, c: f64, now: Instant) -> Option<Pick> {
    let eligible = |i: usize| table.backends[i].breaker.admits(now);
    let cap = load_cap(table, c);
    let mut best: Option<(usize, usize)> = None;
    for index in table.ring.walk(key).take(k).filter(|&i| eligible(i)) {
        let load = table.backends[index].load();
        if load < cap {
            best = Some((index, load));
            break;
        }
        if best.is_none_or(|(_, b)| load < b) {
            best = Some((index, load));
        }
    }
    if let Some(pick) = best.and_then(|(index, _)| admit(table, index, Branch::Owner, now)) {
        return Some(pick);
    }
    // Every owner is out (or the chosen one's half-open permits were taken).
    let mut over_cap = None;
    for (pos, index) in table
        .ring
        .walk(key)
        .enumerate()
        .filter(|&(_, i)| eligible(i))
    {
        let branch = if pos < k {
            Branch::Owner
        } else {
            Branch::Spill
        };
        if table.backends[index].load() >= cap {
            over_cap = over_cap.or(Some((index, branch)));
        } else if let Some(pick) = admit(table, index, branch, now) {
            return Some(pick);
        }
    }
    over_cap.and_then(|(index, branch)| admit(table, index, branch, now))
}

/// Power of two choices on in-flight count (Mitzenmacher, 2001): two
/// distinct backends sampled uniformly, the less loaded eligible one taken;
/// when neither is eligible, the least loaded eligible backend.
fn pick_update(table: &Table, now: Instant, random: &mut impl FnMut() -> u64) -> Option<Pick> {
    let n = table.backends.len();
    let eligible = |i: usize| table.backends[i].breaker.admits(now);
    let load = |i: usize| table.backends[i].load();
    let sampled = match n {
        0 => return None,
        1 => [0, 0],
        _ => sample2(n as u64, random),
    };
    let best = sampled
        .into_iter()
        .filter(|&i| eligible(i))
        .min_by_key(|&i| load(i));
    if let Some(pick) = best.and_then(|i| admit(table, i, Branch::Update, now)) {
        return Some(pick);
    }
    let mut order: Vec<usize> = (0..n).filter(|&i| eligible(i)).collect();
    order.sort_by_key(|&i| load(i));
    order
        .into_iter()
        .find_map(|i| admit(table, i, Branch::Update, now))
}

fn admit(table: &Table, index: usize, branch: Branch, now: Instant) -> Option<Pick> {
    let permit = table.backends[index].breaker.try_acquire_at(now).ok()?;
    Some(Pick {
        index,
        permit,
        branch,
    })
}

/// Two distinct indices in `0..n` (`n >= 2`), uniformly (Floyd's
/// combination algorithm for two).
pub(crate) fn sample2(n: u64, random: &mut impl FnMut() -> u64) -> [usize; 2] {
    let a = random() % (n - 1);
    let b = random() % n;
    let a = if a == b { n - 1 } else { a };
    [a as usize, b as usize]
}

#[cfg(test)]
mod tests;
