//! The backends whose prefix caches hold the most of a request's leading
//! blocks, as their KV-cache events said (feature `kv-events`): read once
//! per request, when it carries [`PromptBlocks`](crate::kv::PromptBlocks)
//! and the balancer has a [`KvIndex`](crate::kv::KvIndex).
//!
//! Pure logic over the index's atomics: no lock, no allocation — one
//! bucket read per block matched, and per backend one more.
//!
//! How the blocks weigh in the pick (`inference.rs`): the backend holding
//! the most is taken over the one today's affinity chooses only if it
//! holds more of the prompt than that one does. A prompt whose cached
//! part is shared by many (an application's system prompt) is thus not
//! drawn to whichever backend served that part first: where no backend
//! holds more than the shared part, the request is routed as without the
//! index, its ring walk keyed by its first block no backend holds (the
//! [`divergent`](Cached::divergent) block): new documents behind one
//! system prompt spread over the ring, and every replica, seeing the
//! same events, sends each to the same backend.

use crate::balance::choose::ctx::Ctx;
use crate::balance::state::table::Table;
use crate::balance::state::traffic::Branch;
use crate::route::RouteView;

/// How many of the best-holding backends an ask keeps: the pick takes the
/// first of them that is eligible, serves the model and is under the
/// bounded-load cap.
pub(crate) const TOP: usize = 4;

/// The request's full blocks, and the backends holding the most of its
/// leading ones, best first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Cached {
    /// The prompt's full blocks; 0 without [`PromptBlocks`](crate::kv::PromptBlocks).
    pub(crate) total: u32,
    /// `(backend index, leading blocks held, tie-break)`, best first.
    top: [(u32, u32, u64); TOP],
    len: u8,
    /// The hash of the first block no backend holds (of the last, if
    /// every block is held somewhere): what the ring walk is keyed by
    /// when the request goes where today's affinity sends it. 0 without
    /// blocks.
    pub(crate) divergent: u64,
}

impl Cached {
    /// The best-holding backends of `table` for `route`'s prompt blocks;
    /// none without them (or without the feature).
    #[cfg(feature = "kv-events")]
    pub(crate) fn of(table: &Table, route: &RouteView<'_>) -> Self {
        let Some(blocks) = route
            .extensions
            .and_then(|e| e.get::<crate::kv::PromptBlocks>())
        else {
            return Self::default();
        };
        let chain = blocks.hashes();
        let mut cached = Self {
            total: chain.len() as u32,
            ..Self::default()
        };
        let Some(&first) = chain.first() else {
            return cached;
        };
        let mut most = 0;
        for (i, state) in table.backends.iter().enumerate() {
            let Some(set) = &state.blocks else { continue };
            let held = set.matched(chain);
            most = most.max(held);
            if held > 0 {
                // Ties: rendezvous order on the backend's ID and the
                // prompt's first block, the same in every replica.
                let order = xxhash_rust::xxh3::xxh3_64_with_seed(state.id.as_bytes(), first);
                cached.offer(i as u32, held as u32, order);
            }
        }
        cached.divergent = chain[most.min(chain.len() - 1)];
        cached
    }

    /// Without the feature: none.
    #[cfg(not(feature = "kv-events"))]
    pub(crate) fn of(_table: &Table, _route: &RouteView<'_>) -> Self {
        Self::default()
    }

    /// Keeps backend `i` among the best if it holds more (or as many and
    /// ranks first in `order`).
    #[cfg_attr(not(feature = "kv-events"), allow(dead_code))]
    fn offer(&mut self, i: u32, held: u32, order: u64) {
        let len = self.len as usize;
        let better = |(_, h, o): (u32, u32, u64)| held > h || (held == h && order > o);
        let at = self.top[..len]
            .iter()
            .position(|&t| better(t))
            .unwrap_or(len);
        if at >= TOP {
            return;
        }
        let end = len.min(TOP - 1);
        self.top.copy_within(at..end, at + 1);
        self.top[at] = (i, held, order);
        self.len = (len + 1).min(TOP) as u8;
    }

    /// How many leading blocks backend `i` holds, if it is among the
    /// best few (else 0: it holds fewer than the last of them).
    pub(crate) fn held_by(&self, i: usize) -> usize {
        self.candidates()
            .find(|&(c, _)| c == i)
            .map_or(0, |(_, held)| held)
    }

    /// The backends holding any leading block, best first: `(index,
    /// blocks held)`.
    pub(crate) fn candidates(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.top[..self.len as usize]
            .iter()
            .map(|&(i, held, _)| (i as usize, held as usize))
    }
}

/// With prompt blocks cached somewhere (`cached`, the ask's): the backend holding the most of
/// the prompt's leading blocks that is eligible, has the model resident
/// and is `under` the bounded-load cap (the best [`TOP`] only) — if it
/// holds more of them than `warm`'s choice (today's affinity) does.
pub(crate) fn choice(
    ctx: &Ctx<'_>,
    cached: &Cached,
    warm: Option<(usize, Branch)>,
    under: impl Fn(usize) -> bool,
) -> Option<(usize, Branch)> {
    let floor = warm.map_or(0, |(i, _)| cached.held_by(i));
    cached
        .candidates()
        .take_while(|&(_, held)| held > floor)
        .map(|(i, _)| i)
        .find(|&i| ctx.eligible(i) && ctx.resident(i, ctx.key) && under(i))
        .map(|i| (i, Branch::CachedBlocks))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_held_come_first_and_ties_go_by_order() {
        let mut c = Cached::default();
        for (i, held, order) in [
            (0, 2, 5),
            (1, 7, 1),
            (2, 2, 9),
            (3, 1, 0),
            (4, 7, 3),
            (5, 3, 0),
        ] {
            c.offer(i, held, order);
        }
        let got: Vec<(usize, usize)> = c.candidates().collect();
        assert_eq!(got, vec![(4, 7), (1, 7), (5, 3), (2, 2)]);
    }

    #[test]
    fn without_blocks_there_are_no_candidates() {
        assert_eq!(Cached::default().candidates().count(), 0);
    }
}
