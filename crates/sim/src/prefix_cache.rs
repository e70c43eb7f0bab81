//! A server's KV cache of prompt prefix blocks, as vLLM's automatic prefix
//! caching keeps it: pure logic, no I/O.
//!
//! A block is identified by its chained key
//! ([`protocol::prompt_blocks`](super::protocol::prompt_blocks)), so the
//! cached part of a prompt is its longest run of leading blocks found.
//! Eviction is LRU by block; when a prompt's blocks are inserted (after its
//! prefill) they are stamped from the last to the first, so the head of a
//! prompt is more recent than its tail and the tail is evicted first — as
//! vLLM frees a finished sequence's blocks tail first, keeping the shared
//! heads that other prompts are likeliest to reuse.

use std::collections::{BTreeMap, HashMap};

use super::prompt::BLOCK_TOKENS;

/// The cache: at most `capacity` blocks (`capacity_tokens / 16`).
#[derive(Debug)]
pub(crate) struct PrefixCache {
    capacity: usize,
    /// Block key → its recency stamp.
    stamps: HashMap<u64, u64>,
    /// Recency stamp → block key, oldest first.
    order: BTreeMap<u64, u64>,
    /// The next stamp (grows by one per touched block).
    clock: u64,
}

impl PrefixCache {
    /// An empty cache holding up to `capacity_tokens / 16` blocks (a
    /// partial block of capacity is not usable).
    pub(crate) fn new(capacity_tokens: u64) -> Self {
        let capacity = usize::try_from(capacity_tokens / BLOCK_TOKENS).unwrap_or(usize::MAX);
        Self {
            capacity,
            stamps: HashMap::new(),
            order: BTreeMap::new(),
            clock: 0,
        }
    }

    /// Leading blocks of `blocks` found in the cache: the first miss ends
    /// the match, whatever follows it. Does not touch recency.
    pub(crate) fn cached_blocks(&self, blocks: &[u64]) -> usize {
        blocks
            .iter()
            .take_while(|key| self.stamps.contains_key(key))
            .count()
    }

    /// Inserts (or touches) every block of `blocks`, the first the most
    /// recent, then evicts the least recent blocks past capacity — which,
    /// for a prompt longer than the whole cache, is its own tail.
    pub(crate) fn insert(&mut self, blocks: &[u64]) {
        for &key in blocks.iter().rev() {
            let stamp = self.clock;
            self.clock += 1;
            if let Some(old) = self.stamps.insert(key, stamp) {
                self.order.remove(&old);
            }
            self.order.insert(stamp, key);
        }
        while self.stamps.len() > self.capacity {
            let Some((_, key)) = self.order.pop_first() else {
                break;
            };
            self.stamps.remove(&key);
        }
    }

    /// Blocks held now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.stamps.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prompt_hits_after_its_insert() {
        let mut cache = PrefixCache::new(1_000);
        assert_eq!(cache.cached_blocks(&[1, 2, 3]), 0);
        cache.insert(&[1, 2, 3]);
        assert_eq!(cache.cached_blocks(&[1, 2, 3]), 3);
        assert_eq!(cache.cached_blocks(&[1, 2, 3, 4, 5]), 3);
        assert_eq!(cache.cached_blocks(&[]), 0);
    }

    #[test]
    fn a_match_stops_at_the_first_miss() {
        let mut cache = PrefixCache::new(1_000);
        cache.insert(&[1, 2, 3, 4]);
        assert_eq!(cache.cached_blocks(&[1, 2, 9, 4]), 2);
        assert_eq!(cache.cached_blocks(&[9, 2, 3, 4]), 0);
    }

    #[test]
    fn the_tail_is_evicted_before_the_head() {
        // Room for 4 blocks (64 tokens, plus a partial block unused).
        let mut cache = PrefixCache::new(4 * 16 + 15);
        cache.insert(&[1, 2, 3]);
        cache.insert(&[7, 8]);
        // 5 blocks for 4 places: the oldest is the first prompt's tail.
        assert_eq!(cache.len(), 4);
        assert_eq!(cache.cached_blocks(&[1, 2, 3]), 2);
        assert_eq!(cache.cached_blocks(&[7, 8]), 2);
        // Touching the first prompt's head makes the second the older.
        cache.insert(&[1, 2]);
        cache.insert(&[5]);
        assert_eq!(cache.cached_blocks(&[1, 2]), 2);
        assert_eq!(cache.cached_blocks(&[7, 8]), 1);
    }

    #[test]
    fn a_prompt_longer_than_the_cache_keeps_its_head() {
        let mut cache = PrefixCache::new(3 * 16);
        let long: Vec<u64> = (100..110).collect();
        cache.insert(&long);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.cached_blocks(&long), 3);
        assert_eq!(PrefixCache::new(15).cached_blocks(&[1]), 0);
        let mut none = PrefixCache::new(15);
        none.insert(&[1]);
        assert_eq!(none.len(), 0);
    }

    /// A reference LRU over a list (front the most recent), checked
    /// against the cache on seeded random inserts: same blocks held.
    #[test]
    fn capacity_and_recency_match_a_reference_lru() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for capacity in [1usize, 2, 5, 17] {
            let mut cache = PrefixCache::new(capacity as u64 * 16);
            let mut reference: Vec<u64> = Vec::new();
            for _ in 0..500 {
                let len = (next() % 6) as usize;
                // Distinct keys within a prompt, as chained keys are.
                let mut blocks: Vec<u64> = Vec::new();
                for _ in 0..len {
                    let key = next() % 12;
                    if !blocks.contains(&key) {
                        blocks.push(key);
                    }
                }
                let hit = blocks.iter().take_while(|b| reference.contains(b)).count();
                assert_eq!(cache.cached_blocks(&blocks), hit);
                cache.insert(&blocks);
                for b in blocks.iter().rev() {
                    reference.retain(|x| x != b);
                    reference.insert(0, *b);
                }
                reference.truncate(capacity);
                assert_eq!(cache.len(), reference.len());
                for b in &reference {
                    assert_eq!(cache.cached_blocks(&[*b]), 1);
                }
            }
        }
    }
}
