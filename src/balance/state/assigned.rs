//! The owners [`assign::plan`](super::assign::plan) gave the models in
//! demand, as the picks read them (atomics: no lock, no allocation), and
//! the walk a pick takes: those owners first, then the ring's walk without
//! them.
//!
//! A fixed table of entries indexed by the model ID's hash; each entry is
//! a sequence lock over its key and owners — the one writer (the balancer's
//! owner-plan task, `tasks/assign.rs`) makes the count odd while it writes, and a reader that
//! sees it odd, or changed across its read, takes the ring's owners. A
//! model whose entry another model holds takes the ring's owners too.

use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, Ordering};

use crate::balance::state::assign::{Assigned, MAX_ASSIGNED};
use crate::ring::{Ring, Walk};

/// Entries in the table (a power of two).
pub(crate) const ENTRIES: usize = 1024;

#[derive(Debug, Default)]
struct Entry {
    /// Odd while the writer writes the entry.
    seq: AtomicU32,
    key: AtomicU64,
    len: AtomicU8,
    owners: [AtomicU32; MAX_ASSIGNED],
}

/// Each model in demand's owners, by its hash (see the module docs).
#[derive(Debug)]
pub(crate) struct AssignedTable {
    entries: Box<[Entry]>,
}

impl Default for AssignedTable {
    fn default() -> Self {
        Self {
            entries: (0..ENTRIES).map(|_| Entry::default()).collect(),
        }
    }
}

impl AssignedTable {
    /// The owners assigned to the model with hash `key`; `len` 0 when it
    /// has none (not in demand at the last plan, its entry another's, or
    /// being written).
    #[inline]
    pub(crate) fn get(&self, key: u64) -> Assigned {
        let entry = &self.entries[key as usize % ENTRIES];
        let seq = entry.seq.load(Ordering::Acquire);
        if seq % 2 == 1 || entry.key.load(Ordering::Relaxed) != key {
            return Assigned::default();
        }
        let mut read = Assigned {
            len: entry.len.load(Ordering::Relaxed).min(MAX_ASSIGNED as u8),
            ..Assigned::default()
        };
        for (slot, owner) in read.owners.iter_mut().zip(&entry.owners) {
            *slot = owner.load(Ordering::Relaxed);
        }
        fence(Ordering::Acquire);
        if entry.seq.load(Ordering::Relaxed) != seq {
            return Assigned::default();
        }
        read
    }

    /// Replaces the table's contents with `plan` (a model whose entry a
    /// model before it in `plan` took keeps the ring's owners);
    /// entries not in it are cleared. One writer at a time.
    pub(crate) fn store(&self, plan: &[(u64, Assigned)]) {
        let mut taken = vec![false; ENTRIES];
        for (key, assigned) in plan {
            let at = *key as usize % ENTRIES;
            if std::mem::replace(&mut taken[at], true) {
                continue;
            }
            let entry = &self.entries[at];
            if entry.key.load(Ordering::Relaxed) == *key && self.get(*key) == *assigned {
                continue;
            }
            write(entry, *key, assigned);
        }
        for (entry, taken) in self.entries.iter().zip(taken) {
            if !taken && entry.len.load(Ordering::Relaxed) != 0 {
                write(entry, 0, &Assigned::default());
            }
        }
    }
}

/// Writes one entry under its sequence lock.
fn write(entry: &Entry, key: u64, assigned: &Assigned) {
    let seq = entry.seq.load(Ordering::Relaxed);
    entry.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
    fence(Ordering::Release);
    entry.key.store(key, Ordering::Relaxed);
    entry.len.store(assigned.len, Ordering::Relaxed);
    for (owner, &value) in entry.owners.iter().zip(&assigned.owners) {
        owner.store(value, Ordering::Relaxed);
    }
    entry.seq.store(seq.wrapping_add(2), Ordering::Release);
}

/// A pick's walk: the assigned owners in order, then the ring's walk from
/// the key without them.
#[derive(Debug, Clone)]
pub(crate) struct OwnersWalk<'a> {
    assigned: Assigned,
    next: u8,
    ring: Walk<'a>,
}

impl<'a> OwnersWalk<'a> {
    /// The walk from `key` with `assigned` first.
    #[inline]
    pub(crate) fn new(ring: &'a Ring, key: u64, assigned: Assigned) -> Self {
        Self {
            assigned,
            next: 0,
            ring: ring.walk(key),
        }
    }
}

impl Iterator for OwnersWalk<'_> {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        if self.next < self.assigned.len {
            self.next += 1;
            return Some(self.assigned.owners[usize::from(self.next - 1)] as usize);
        }
        let assigned = &self.assigned;
        self.ring.by_ref().find(|&i| !assigned.lists(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assigned(owners: &[u32]) -> Assigned {
        let mut a = Assigned {
            len: owners.len() as u8,
            ..Assigned::default()
        };
        a.owners[..owners.len()].copy_from_slice(owners);
        a
    }

    #[test]
    fn a_stored_plan_is_read_back_and_a_dropped_model_cleared() {
        let table = AssignedTable::default();
        assert_eq!(table.get(7).len, 0, "empty at first");
        table.store(&[(7, assigned(&[3, 1])), (7 + ENTRIES as u64, assigned(&[2]))]);
        assert_eq!(table.get(7), assigned(&[3, 1]));
        assert_eq!(
            table.get(7 + ENTRIES as u64).len,
            0,
            "the entry is the first model's: the other takes the ring's owners"
        );
        table.store(&[(9, assigned(&[0]))]);
        assert_eq!(table.get(7).len, 0, "no longer in the plan");
        assert_eq!(table.get(9), assigned(&[0]));
    }
}
