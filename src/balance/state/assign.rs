//! Which backends own each model in demand: consistent hashing bounded
//! by the models each backend holds (pure logic: no clock, no IO; it
//! allocates, and runs off the request path).
//!
//! The ring alone gives each model the first `k` backends of its walk,
//! wherever the other models' owners fell: over 8 backends and 32 models,
//! some backend owns 7 where it holds 5, and its LRU evicts, for ever, a
//! model the next request needs — each eviction a cold load later, each
//! load a serving slot held for its load time.
//!
//! [`plan`] bounds the ring the way Mirrokni, Thorup and Zadimoghaddam
//! bound it ("Consistent Hashing with Bounded Loads", SODA 2018), with a
//! backend's model slots as its capacity: each model's `k` owners are the
//! first backends along its walk with a model slot left (those where it is
//! resident first: a copy there costs no load), after the models before
//! it took theirs; where none has a slot left, the first along the walk.
//! The requests a backend serves are bounded apart, by the picks'
//! bounded-load cap.
//!
//! The models are placed in a fixed order (by hash), not by demand: the
//! plan changes only when a model comes or goes, its owner count changes,
//! or a backend joins or leaves — a plan ordered by sampled shares moved
//! models between backends as the shares wavered, a load each (in the peer
//! comparison at 700 req/s its p99 was the ring's, about 1 s, where this
//! plan's was about 0.8 s). A model keeps its previous owners first while
//! they have a slot. Two balancers over the same backends, the same
//! models in demand and the same residency agree on every model's owners.

use crate::ring::Ring;

/// The most owners an assignment lists; a model with more keeps the
/// ring's.
pub(crate) const MAX_ASSIGNED: usize = 8;

/// How far along its walk a model looks for a backend with a slot left,
/// in distinct backends.
const SCAN: usize = 64;

/// A model's owners in walk order: the first `len` of `owners` (ring
/// member indices); `len` 0 for none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Assigned {
    pub(crate) len: u8,
    pub(crate) owners: [u32; MAX_ASSIGNED],
}

impl Assigned {
    /// The listed owners.
    #[inline]
    pub(crate) fn owners(&self) -> impl Iterator<Item = usize> + '_ {
        self.owners[..usize::from(self.len)]
            .iter()
            .map(|&i| i as usize)
    }

    /// How many owners a pick takes: as many as listed, else `k` (what
    /// demand gives a model without a plan).
    #[inline]
    pub(crate) fn count_or(&self, k: usize) -> usize {
        match self.len {
            0 => k,
            len => usize::from(len),
        }
    }

    /// Whether ring member `i` is listed.
    #[inline]
    pub(crate) fn lists(&self, i: usize) -> bool {
        self.owners[..usize::from(self.len)]
            .iter()
            .any(|&o| o as usize == i)
    }

    fn push(&mut self, i: usize) {
        self.owners[usize::from(self.len)] = i as u32;
        self.len += 1;
    }
}

/// One model in demand, as [`plan`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Demanded {
    /// The model ID's hash.
    pub(crate) key: u64,
    /// How many owners demand gives it.
    pub(crate) owners: usize,
    /// Its owners at the last plan (`len` 0: none).
    pub(crate) previous: Assigned,
}

/// The owners of each of `models` over `ring`'s members, whose model
/// slots are `slots` (index for index; see the module docs): the models in
/// order of hash, each keeping its previous owners with a slot left, then
/// taking the first members along its walk with a slot left, those where
/// `resident(member, key)` first, then the first along its walk. A model
/// with more owners than an [`Assigned`] lists ([`MAX_ASSIGNED`]) keeps
/// the ring's first `k`, counted where they are, and is not returned; so
/// is a model listed twice after its first. Returned in order of hash.
pub(crate) fn plan(
    ring: &Ring,
    slots: &[usize],
    models: &[Demanded],
    resident: impl Fn(usize, u64) -> bool,
) -> Vec<(u64, Assigned)> {
    let n = ring.len().min(slots.len());
    if n == 0 {
        return Vec::new();
    }
    let mut order: Vec<&Demanded> = models.iter().collect();
    order.sort_by_key(|m| m.key);
    order.dedup_by_key(|m| m.key);
    let mut held = vec![0usize; n];
    let take = |held: &mut [usize], i: usize, chosen: &mut Assigned| {
        chosen.push(i);
        held[i] += 1;
    };
    let mut out: Vec<(u64, Assigned)> = Vec::with_capacity(order.len());
    // First every model keeps its previous owners with a slot left.
    for m in &order {
        let k = m.owners.clamp(1, n);
        let mut kept = Assigned::default();
        if k > MAX_ASSIGNED {
            for i in ring.walk(m.key).take(k) {
                held[i] += 1;
            }
        } else {
            for i in m.previous.owners().filter(|&i| i < n) {
                if usize::from(kept.len) < k && held[i] < slots[i] && !kept.lists(i) {
                    take(&mut held, i, &mut kept);
                }
            }
        }
        out.push((m.key, kept));
    }
    // Then the owners still missing, along each model's walk.
    let mut candidates = Vec::with_capacity(SCAN);
    for (m, (_, chosen)) in order.iter().zip(out.iter_mut()) {
        let k = m.owners.clamp(1, n);
        if k > MAX_ASSIGNED || usize::from(chosen.len) == k {
            continue;
        }
        candidates.clear();
        candidates.extend(ring.walk(m.key).take(SCAN));
        // A stable sort: the walk's order within each part.
        candidates.sort_by_key(|&i| !resident(i, m.key));
        for with_slot in [true, false] {
            for &i in &candidates {
                if usize::from(chosen.len) == k {
                    break;
                }
                if !chosen.lists(i) && (!with_slot || held[i] < slots[i]) {
                    take(&mut held, i, chosen);
                }
            }
        }
    }
    out.retain(|(_, assigned)| assigned.len > 0);
    out
}

#[cfg(test)]
#[path = "assign/tests.rs"]
mod tests;
