//! A hedge's backup: where a second copy of a slow request goes, or why
//! it goes nowhere.
//!
//! A backup helps only where the model is ready to serve: a backup that
//! loads the model races a slow answer with a load, and the load (once
//! started, a server finishes it) evicts a model another request is
//! using. So:
//!
//! * a backend where the model was **served** (a success there, or the
//!   server's own list) comes first: the cheapest such owner, else the
//!   first such backend past the owners along the ring;
//! * when the first attempt went where the model was served (a warm
//!   request that is slow: a stalled server, a long queue), a backend
//!   whose model list the balancer has **never seen** (no probe, no
//!   residency header, no declared models: absence there means only
//!   "never sent there") is next, the first along the ring — the next
//!   owner, as affinity would choose. Without any residency source, this
//!   is how backups go at all;
//! * nothing else: a first attempt sent cold (its backend still loading
//!   the model) is not raced by a backup that would load it again, and a
//!   backend whose list says it does not hold the model is not sent one.
//!   The pick is refused ([`Miss::NoAlternative`]) and the hedging layer
//!   counts the backup suppressed.

use crate::balance::choose::ask::Ask;
use crate::balance::choose::ctx::{Ctx, Miss, Pick, MAX_OWNERS, SPILL_SCAN};
use crate::balance::state::residency::Presence;
use crate::balance::state::traffic::Branch;

/// The backup's pick for `ask`, its first attempt having gone to `x`
/// (see the [module docs](self)). Breaker permits as any pick: a
/// candidate whose breaker refuses is passed over.
pub(crate) fn pick_backup(ctx: &Ctx<'_>, ask: &Ask, x: usize) -> Result<Pick, Miss> {
    let key = ask.key;
    let k = ask.owners.clamp(1, MAX_OWNERS);
    let first_warm = ctx.presence(x, key) == Presence::Served;
    let candidates = || {
        ask.walk(ctx.table)
            .take(k + SPILL_SCAN)
            .enumerate()
            .filter(move |&(_, i)| i != x && ctx.eligible(i) && ctx.room(i))
    };
    let branch = |pos: usize, warm: bool| match (pos < k, warm) {
        (false, _) => Branch::Spill,
        (true, true) => Branch::ResidentOwner,
        (true, false) => Branch::ColdOwner,
    };
    let served = |i: usize| ctx.presence(i, key) == Presence::Served;
    let owner = ctx.cheapest(
        candidates()
            .filter(|&(pos, i)| pos < k && served(i))
            .map(|(_, i)| i),
    );
    if let Some(pick) = owner.and_then(|i| ctx.admit(i, Branch::ResidentOwner)) {
        return Ok(pick);
    }
    let warm = candidates()
        .filter(|&(_, i)| served(i))
        .find_map(|(pos, i)| ctx.admit(i, branch(pos, true)));
    if let Some(pick) = warm {
        return Ok(pick);
    }
    if !first_warm {
        return Err(Miss::NoAlternative);
    }
    let now_ms = || ctx.now_ms();
    candidates()
        .filter(|&(_, i)| {
            let residency = &ctx.state(i).residency;
            !residency.is_listed() && !residency.refused(key, now_ms)
        })
        .find_map(|(pos, i)| ctx.admit(i, branch(pos, false)))
        .ok_or(Miss::NoAlternative)
}
