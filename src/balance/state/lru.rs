//! A map bounded to a capacity that evicts its least recently used entry
//! (pure: no lock, no clock, no IO).
//!
//! Entries live in a slab, linked into a recency list by index; a hash map
//! finds a key's slot. Once the slab is full, an insert reuses the least
//! recently used entry's slot, so looking up, refreshing and replacing
//! entries allocates nothing once the map has reached its capacity (the
//! hash map keeps the room it grew to).

use std::collections::HashMap;
use std::hash::Hash;

/// No slot: the end of the recency list.
const NIL: usize = usize::MAX;

#[derive(Debug)]
struct Node<K, V> {
    key: K,
    value: V,
    /// Towards the most recently used.
    prev: usize,
    /// Towards the least recently used.
    next: usize,
}

/// At most `capacity` entries; inserting past it evicts the entry used
/// least recently. [`Lru::get`] and [`Lru::get_or_insert_with`] count as a
/// use, [`Lru::peek`] does not.
#[derive(Debug)]
pub(crate) struct Lru<K, V> {
    slots: HashMap<K, usize>,
    nodes: Vec<Node<K, V>>,
    /// The most recently used entry.
    head: usize,
    /// The least recently used entry: the next evicted.
    tail: usize,
    capacity: usize,
}

impl<K: Copy + Eq + Hash, V> Lru<K, V> {
    /// An empty map holding at most `capacity` entries (at least 1).
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            slots: HashMap::new(),
            nodes: Vec::new(),
            head: NIL,
            tail: NIL,
            capacity: capacity.max(1),
        }
    }

    /// Entries held, at most the capacity.
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The value of `key`, marked most recently used.
    pub(crate) fn get(&mut self, key: &K) -> Option<&V> {
        let slot = *self.slots.get(key)?;
        self.promote(slot);
        Some(&self.nodes[slot].value)
    }

    /// The value of `key`, its recency untouched.
    pub(crate) fn peek(&self, key: &K) -> Option<&V> {
        self.slots.get(key).map(|&slot| &self.nodes[slot].value)
    }

    /// The value of `key`, marked most recently used; inserted from `make`
    /// when absent. A full map evicts its least recently used entry to make
    /// room, and returns the evicted value (for the caller to drop where it
    /// likes).
    pub(crate) fn get_or_insert_with(
        &mut self,
        key: K,
        make: impl FnOnce() -> V,
    ) -> (&V, Option<V>) {
        if let Some(&slot) = self.slots.get(&key) {
            self.promote(slot);
            return (&self.nodes[slot].value, None);
        }
        let (slot, evicted) = if self.nodes.len() < self.capacity {
            self.nodes.push(Node {
                key,
                value: make(),
                prev: NIL,
                next: NIL,
            });
            (self.nodes.len() - 1, None)
        } else {
            let slot = self.tail;
            self.unlink(slot);
            let node = &mut self.nodes[slot];
            self.slots.remove(&node.key);
            node.key = key;
            (slot, Some(std::mem::replace(&mut node.value, make())))
        };
        self.slots.insert(key, slot);
        self.push_front(slot);
        (&self.nodes[slot].value, evicted)
    }

    fn promote(&mut self, slot: usize) {
        if self.head != slot {
            self.unlink(slot);
            self.push_front(slot);
        }
    }

    fn unlink(&mut self, slot: usize) {
        let (prev, next) = (self.nodes[slot].prev, self.nodes[slot].next);
        match prev {
            NIL => self.head = next,
            prev => self.nodes[prev].next = next,
        }
        match next {
            NIL => self.tail = prev,
            next => self.nodes[next].prev = prev,
        }
    }

    fn push_front(&mut self, slot: usize) {
        let old = self.head;
        self.nodes[slot].prev = NIL;
        self.nodes[slot].next = old;
        match old {
            NIL => self.tail = slot,
            old => self.nodes[old].prev = slot,
        }
        self.head = slot;
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::Lru;

    fn insert(lru: &mut Lru<u32, u32>, key: u32) -> Option<u32> {
        lru.get_or_insert_with(key, || key * 10).1
    }

    #[test]
    fn evicts_in_order_of_last_use() {
        let mut lru = Lru::new(3);
        for key in [1, 2, 3] {
            assert_eq!(insert(&mut lru, key), None);
        }
        assert_eq!(lru.get(&1), Some(&10), "1 is now the most recent");
        assert_eq!(insert(&mut lru, 4), Some(20), "2 was the least recent");
        assert_eq!(insert(&mut lru, 3), None, "3 is held: a use, no insert");
        assert_eq!(insert(&mut lru, 5), Some(10), "then 1");
        assert_eq!(insert(&mut lru, 6), Some(40), "then 4");
        assert_eq!(insert(&mut lru, 7), Some(30), "then 3");
        assert_eq!(lru.len(), 3);
        assert!([5, 6, 7].iter().all(|k| lru.peek(k).is_some()));
        assert!([1, 2, 3, 4].iter().all(|k| lru.peek(k).is_none()));
    }

    #[test]
    fn peek_does_not_count_as_a_use() {
        let mut lru = Lru::new(2);
        insert(&mut lru, 1);
        insert(&mut lru, 2);
        assert_eq!(lru.peek(&1), Some(&10));
        assert_eq!(insert(&mut lru, 3), Some(10), "1 stayed the least recent");
    }

    #[test]
    fn capacity_one_keeps_the_last_key() {
        let mut lru = Lru::new(0);
        assert_eq!(insert(&mut lru, 1), None, "capacity 0 reads as 1");
        assert_eq!(insert(&mut lru, 2), Some(10));
        assert_eq!(lru.get(&2), Some(&20));
        assert_eq!(lru.len(), 1);
    }

    proptest! {
        /// Against a model (a vector in order of use): the same keys held,
        /// never more than the capacity, the same entry evicted.
        #[test]
        fn matches_a_model(capacity in 1usize..8, ops in prop::collection::vec((0u32..12, any::<bool>()), 0..200)) {
            let mut lru = Lru::new(capacity);
            let mut model: Vec<u32> = Vec::new(); // least recent first
            for (key, peek) in ops {
                if peek {
                    prop_assert_eq!(lru.peek(&key).copied(), model.contains(&key).then_some(key * 10));
                    continue;
                }
                let evicted = insert(&mut lru, key);
                let expected = if let Some(pos) = model.iter().position(|&k| k == key) {
                    model.remove(pos);
                    None
                } else if model.len() == capacity {
                    Some(model.remove(0) * 10)
                } else {
                    None
                };
                model.push(key);
                prop_assert_eq!(evicted, expected);
                prop_assert!(lru.len() <= capacity);
                prop_assert_eq!(lru.len(), model.len());
            }
        }
    }
}
