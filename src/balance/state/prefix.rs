//! Which prefix groups and sessions a backend served recently: an
//! approximate, memory-bounded record, the balancer's guess at what its
//! prefix (KV) cache holds (pure logic over atomics: no lock; one
//! allocation per backend, at its first prefix).
//!
//! A direct-mapped table of [`SLOTS`] 32-bit tags indexed by the key's low
//! bits, its tag from the high bits: a key is recorded by writing its tag
//! to its slot, replacing whatever was there — the most recent key of each
//! slot is kept, as a cache of that shape keeps it. A lookup can be wrong
//! both ways, rarely: a key another displaced since reads as absent, and
//! two keys with the same slot and tag (one in 2^32 of those sharing a
//! slot) as each other. It errs as the server's cache does, which also
//! evicts what it served: the record only orders owners the bounded-load
//! cap and the model's residency allowed already.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::OnceLock;

use crate::route::PrefixKey;

/// Slots per backend (a power of two): 16 KiB once the backend served a
/// request with a prefix key. The slots a group's or a session's key may
/// use are all of them, so a backend keeps about this many of its most
/// recent keys (fewer where they collide).
pub(crate) const SLOTS: usize = 4096;

/// What a backend's record says of a request's [`PrefixKey`]: the
/// predicted prefix hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
#[non_exhaustive]
pub enum PrefixHit {
    /// Neither its group nor its session was served there recently (or
    /// the request has no prefix key).
    #[default]
    None,
    /// Its group was: the shared part of its prompt (a system prompt, a
    /// document) is likely cached.
    Group,
    /// Its session was: the conversation so far is likely cached.
    Session,
}

/// One backend's record.
#[derive(Debug, Default)]
pub(crate) struct PrefixRecord {
    slots: OnceLock<Box<[AtomicU32]>>,
}

impl PrefixRecord {
    /// What the record says of `key`.
    #[inline]
    pub(crate) fn hit(&self, key: &PrefixKey) -> PrefixHit {
        let Some(slots) = self.slots.get() else {
            return PrefixHit::None;
        };
        let seen = |hash: u64| slots[slot(hash)].load(Relaxed) == tag(hash);
        if key.session().is_some_and(seen) {
            PrefixHit::Session
        } else if seen(key.group()) {
            PrefixHit::Group
        } else {
            PrefixHit::None
        }
    }

    /// Records that the backend serves `key` (its group, and its session),
    /// and returns what the record said of it before. A slot that holds the
    /// tag already is not written: a hot key's slot stays shared in every
    /// core's cache.
    #[inline]
    pub(crate) fn note(&self, key: &PrefixKey) -> PrefixHit {
        let slots = self
            .slots
            .get_or_init(|| (0..SLOTS).map(|_| AtomicU32::new(0)).collect());
        let mut kept = |hash: u64| {
            let slot = &slots[slot(hash)];
            let kept = slot.load(Relaxed) == tag(hash);
            if !kept {
                slot.store(tag(hash), Relaxed);
            }
            kept
        };
        let group = kept(key.group());
        match key.session().map(&mut kept) {
            Some(true) => PrefixHit::Session,
            _ if group => PrefixHit::Group,
            _ => PrefixHit::None,
        }
    }
}

fn slot(hash: u64) -> usize {
    hash as usize & (SLOTS - 1)
}

/// The high 32 bits, never 0 (an empty slot).
fn tag(hash: u64) -> u32 {
    ((hash >> 32) as u32) | 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::ModelId;

    fn key(prompt: &str) -> PrefixKey {
        PrefixKey::from_prompt(&ModelId::new("m").unwrap(), prompt.as_bytes())
    }

    #[test]
    fn a_noted_group_and_session_are_hits() {
        let record = PrefixRecord::default();
        let group = key("system prompt");
        let turn = group.with_session(b"conv-1");
        assert_eq!(record.hit(&turn), PrefixHit::None);
        assert_eq!(record.note(&turn), PrefixHit::None, "what it said before");
        assert_eq!(record.hit(&turn), PrefixHit::Session);
        assert_eq!(record.note(&turn), PrefixHit::Session);
        // Another conversation of the group: the group is a hit.
        assert_eq!(record.hit(&group.with_session(b"conv-2")), PrefixHit::Group);
        assert_eq!(record.hit(&group), PrefixHit::Group);
        assert_eq!(record.hit(&key("another prompt")), PrefixHit::None);
    }

    #[test]
    fn a_slot_keeps_its_most_recent_key() {
        let record = PrefixRecord::default();
        // Two groups in one slot (found by search: deterministic).
        let a = key("a");
        let b = (0..)
            .map(|i| key(&format!("b{i}")))
            .find(|b| slot(b.group()) == slot(a.group()) && tag(b.group()) != tag(a.group()))
            .unwrap();
        record.note(&a);
        record.note(&b);
        assert_eq!(record.hit(&b), PrefixHit::Group);
        assert_eq!(record.hit(&a), PrefixHit::None);
    }

    #[test]
    fn memory_is_bounded_whatever_is_noted() {
        let record = PrefixRecord::default();
        for i in 0..10 * SLOTS {
            record.note(&key(&i.to_string()).with_session(&i.to_le_bytes()));
        }
        assert_eq!(record.slots.get().map(|s| s.len()), Some(SLOTS));
        // The most recent keys are mostly still there.
        let kept = (9 * SLOTS..10 * SLOTS)
            .rev()
            .take(SLOTS / 8)
            .filter(|i| record.hit(&key(&i.to_string())) != PrefixHit::None)
            .count();
        assert!(kept > SLOTS / 8 * 3 / 4, "{kept}");
    }
}
