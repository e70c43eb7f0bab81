//! A pick's [`RoutingReceipt`]: the reason, the owners, the predicted
//! prefix hit, and the runner-up.

use crate::balance::choose::ask::Ask;
use crate::balance::choose::ctx::{Pick, MAX_OWNERS, SPILL_SCAN};
use crate::balance::receipt::{BlocksHeld, RouteReason, RoutingReceipt};
use crate::balance::state::clock::Now;
use crate::balance::state::prefix::PrefixHit;
use crate::balance::state::residency::Presence;
use crate::balance::state::table::Table;
use crate::route::{RequestKind, RouteView};

/// The receipt of `picked`, made for `ask` over `table` (allocates: only
/// with receipts on).
pub(crate) fn receipt(
    table: &Table,
    ask: &Ask,
    route: &RouteView<'_>,
    picked: &Pick,
    now: &Now,
) -> RoutingReceipt {
    let update = ask.kind == RequestKind::Update;
    RoutingReceipt {
        backend: table.backends[picked.index].id.clone(),
        reason: RouteReason::of(picked.branch),
        owners: if update { 0 } else { ask.owners },
        prefix_hit: picked.hit,
        runner_up: if update {
            None
        } else {
            runner_up(table, ask, picked.index, now).map(|i| table.backends[i].id.clone())
        },
        cached_blocks: blocks_held(table, ask, route, picked.index),
    }
}

/// What the chosen backend held of the prompt's blocks, and the backend
/// holding the most after it; `None` without prompt blocks.
#[cfg(feature = "kv-events")]
fn blocks_held(
    table: &Table,
    ask: &Ask,
    route: &RouteView<'_>,
    chosen: usize,
) -> Option<BlocksHeld> {
    let blocks = route.extensions?.get::<crate::kv::PromptBlocks>()?;
    let held = table.backends[chosen]
        .blocks
        .as_ref()
        .map_or(0, |set| set.matched(blocks.hashes()));
    let runner_up = ask
        .cached
        .candidates()
        .find(|&(i, _)| i != chosen)
        .map(|(i, n)| (table.backends[i].id.clone(), n));
    Some(BlocksHeld::new(blocks.len(), held, runner_up))
}

#[cfg(not(feature = "kv-events"))]
fn blocks_held(_: &Table, _: &Ask, _: &RouteView<'_>, _: usize) -> Option<BlocksHeld> {
    None
}

/// The backend ranked after `chosen`: among the other eligible owners —
/// with one owner, or for a spill, the next eligible backends along the
/// walk too, within [`SPILL_SCAN`] — one with the model served first, then the longest predicted
/// prefix hit, then the lowest cost.
fn runner_up(table: &Table, ask: &Ask, chosen: usize, now: &Now) -> Option<usize> {
    let k = ask.owners.clamp(1, MAX_OWNERS);
    let now_ms = || table.millis(now.get());
    let rank = |i: usize| {
        let state = &table.backends[i];
        let served = state.residency.presence(ask.key, now_ms) == Presence::Served;
        let hit = ask
            .prefix
            .map_or(PrefixHit::None, |key| state.prefixes.hit(&key));
        (served, hit)
    };
    let mut best: Option<(usize, (bool, PrefixHit), f64)> = None;
    for (pos, i) in ask.walk(table).enumerate() {
        if pos >= k && (best.is_some() || pos >= k + SPILL_SCAN) {
            break;
        }
        if i == chosen || !table.backends[i].eligible_for(ask.key, now) {
            continue;
        }
        let (r, cost) = (rank(i), table.backends[i].cost());
        if best.is_none_or(|(_, br, bc)| r > br || (r == br && cost < bc)) {
            best = Some((i, r, cost));
        }
    }
    best.map(|(i, _, _)| i)
}
