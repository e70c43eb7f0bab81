//! Spills: where an inference request goes past its model's owners along
//! the ring — a backend with the model resident, else one where loading
//! it evicts the least.

use crate::balance::choose::ask::Ask;
use crate::balance::choose::ctx::{Ctx, SPILL_SCAN};
use crate::balance::state::prefix::PrefixHit;
use crate::balance::state::traffic::Branch;

/// The first eligible backend past the `k` owners, within [`SPILL_SCAN`],
/// that has the model resident and passes `ok` — with a prefix key, the
/// first of those whose record says it served the session, else the
/// group, else the first: a spilled conversation goes back where it
/// spilled to before.
pub(crate) fn spill_resident(
    ctx: &Ctx<'_>,
    ask: &Ask,
    k: usize,
    ok: impl Fn(usize) -> bool,
) -> Option<usize> {
    let mut found = ask
        .walk(ctx.table)
        .skip(k)
        .take(SPILL_SCAN)
        .filter(|&i| ctx.eligible(i) && ok(i) && ctx.resident(i, ask.key));
    let first = found.next()?;
    let Some(key) = ask.prefix else {
        return Some(first);
    };
    let hit = |i: usize| ctx.state(i).prefixes.hit(&key);
    let mut best = (first, hit(first));
    while best.1 != PrefixHit::Session {
        let Some(i) = found.next() else { break };
        let h = hit(i);
        if h > best.1 {
            best = (i, h);
        }
    }
    Some(best.0)
}

/// What a cold spill may do to make room for the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Room {
    /// Take a free model slot only: nothing is evicted.
    FreeSlot,
    /// Evict the model idle longest, if no slot is free.
    Evict,
}

/// Among the first [`SPILL_SCAN`] eligible backends past the `k` owners
/// that pass `ok`, the one whose least recently used model has been idle
/// longest (a free slot first; the earlier on ties), under `room`: where
/// loading the model evicts the least in use.
pub(crate) fn spill_cold(
    ctx: &Ctx<'_>,
    ask: &Ask,
    k: usize,
    ok: impl Fn(usize) -> bool,
    now_ms: u64,
    room: Room,
) -> Option<(usize, Branch)> {
    // A free slot's idle time is `u64::MAX`.
    let min_idle_ms = match room {
        Room::FreeSlot => u64::MAX,
        Room::Evict => 0,
    };
    let mut best: Option<(usize, u64)> = None;
    for i in ask
        .walk(ctx.table)
        .skip(k)
        .filter(|&i| ctx.eligible(i) && ok(i))
        .take(SPILL_SCAN)
    {
        let idle = ctx.state(i).residency.idle_ms(now_ms);
        if idle >= min_idle_ms && best.is_none_or(|(_, b)| idle > b) {
            best = Some((i, idle));
        }
        if idle == u64::MAX {
            break;
        }
    }
    best.map(|(i, _)| (i, Branch::Spill))
}
