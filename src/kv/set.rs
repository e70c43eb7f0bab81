//! One backend's cached blocks as the index knows them: a bounded,
//! lock-free set of block hashes (pure logic over atomics).
//!
//! Buckets of [`WAYS`] slots (one 32-byte group), the bucket chosen by the
//! hash's low bits. A block stored where its bucket is full displaces one
//! of the bucket's blocks (the way named by the hash's high bits), which
//! then reads as absent: the set errs toward "not cached", which costs a
//! prefill, never a wrong answer. A hash present reads as present unless
//! displaced; two blocks read as one only if their 64-bit hashes are equal.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Slots a bucket.
pub(crate) const WAYS: usize = 4;

/// The block hashes one backend holds.
#[derive(Debug)]
pub(crate) struct BlockSet {
    slots: Box<[AtomicU64]>,
    /// Buckets − 1 (a power of two less one).
    mask: u64,
}

impl BlockSet {
    /// A set with room for about `capacity` blocks: twice as many slots,
    /// so a full set displaces few (at least one bucket).
    pub(crate) fn new(capacity: usize) -> Self {
        let buckets = (capacity.saturating_mul(2) / WAYS)
            .max(1)
            .next_power_of_two();
        let slots = (0..buckets * WAYS).map(|_| AtomicU64::new(0)).collect();
        Self {
            slots,
            mask: buckets as u64 - 1,
        }
    }

    fn bucket(&self, hash: u64) -> &[AtomicU64] {
        let start = (hash & self.mask) as usize * WAYS;
        &self.slots[start..start + WAYS]
    }

    /// Whether `hash` is held.
    #[inline]
    pub(crate) fn contains(&self, hash: u64) -> bool {
        hash != 0
            && self
                .bucket(hash)
                .iter()
                .any(|slot| slot.load(Relaxed) == hash)
    }

    /// Notes `hash` as held.
    pub(crate) fn insert(&self, hash: u64) {
        if hash == 0 {
            return;
        }
        let bucket = self.bucket(hash);
        if bucket.iter().any(|slot| slot.load(Relaxed) == hash) {
            return;
        }
        for slot in bucket {
            if slot.compare_exchange(0, hash, Relaxed, Relaxed).is_ok() {
                return;
            }
        }
        bucket[(hash >> 62) as usize % WAYS].store(hash, Relaxed);
    }

    /// Forgets `hash`.
    pub(crate) fn remove(&self, hash: u64) {
        if hash == 0 {
            return;
        }
        for slot in self.bucket(hash) {
            let _ = slot.compare_exchange(hash, 0, Relaxed, Relaxed);
        }
    }

    /// Forgets every block.
    pub(crate) fn clear(&self) {
        for slot in self.slots.iter() {
            slot.store(0, Relaxed);
        }
    }

    /// How many of `chain`'s leading hashes are held: the run from the
    /// first, up to the first one absent.
    #[inline]
    pub(crate) fn matched(&self, chain: &[u64]) -> usize {
        chain.iter().take_while(|&&h| self.contains(h)).count()
    }

    /// How many blocks are held (a scan: for read-outs, not picks).
    pub(crate) fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.load(Relaxed) != 0).count()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64),
        Remove(u64),
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few distinct hashes, so removals and repeats hit.
        prop_oneof![
            8 => (1u64..64).prop_map(Op::Insert),
            4 => (1u64..64).prop_map(Op::Remove),
            1 => Just(Op::Clear),
        ]
    }

    proptest! {
        /// With room for every hash, the set is exactly the model set.
        #[test]
        fn with_room_it_is_the_set_the_events_describe(ops in proptest::collection::vec(op(), 0..200)) {
            let set = BlockSet::new(4096);
            let mut model = HashSet::new();
            for op in ops {
                match op {
                    Op::Insert(h) => { set.insert(h); model.insert(h); }
                    Op::Remove(h) => { set.remove(h); model.remove(&h); }
                    Op::Clear => { set.clear(); model.clear(); }
                }
                for h in 1u64..64 {
                    prop_assert_eq!(set.contains(h), model.contains(&h), "hash {}", h);
                }
                prop_assert_eq!(set.len(), model.len());
            }
        }

        /// Past its room it errs one way only: it never holds a hash the
        /// events did not store (or removed since), and it is bounded.
        #[test]
        fn past_its_room_it_only_forgets(ops in proptest::collection::vec(op(), 0..400)) {
            let set = BlockSet::new(2); // one bucket of 4
            let mut model = HashSet::new();
            for op in ops {
                match op {
                    Op::Insert(h) => { set.insert(h); model.insert(h); }
                    Op::Remove(h) => { set.remove(h); model.remove(&h); }
                    Op::Clear => { set.clear(); model.clear(); }
                }
                for h in 1u64..64 {
                    prop_assert!(!set.contains(h) || model.contains(&h), "hash {} held but not stored", h);
                }
                prop_assert!(set.len() <= WAYS);
            }
        }
    }

    #[test]
    fn matched_counts_the_leading_run() {
        let set = BlockSet::new(64);
        for h in [11, 12, 14] {
            set.insert(h);
        }
        assert_eq!(set.matched(&[11, 12, 13, 14]), 2);
        assert_eq!(set.matched(&[13, 11]), 0);
        assert_eq!(set.matched(&[]), 0);
        assert!(!set.contains(0));
    }
}
