//! Which prefix groups and sessions a backend served recently: an
//! approximate, memory-bounded record, the balancer's guess at what its
//! prefix (KV) cache holds (pure logic over atomics: no lock; one
//! allocation per backend, at its first prefix key).
//!
//! [`LINES`] cache lines of 64 bytes, direct-mapped by the group's hash:
//! a line holds its group's 32-bit tag and [`SESSIONS`] 16-bit tags of the
//! sessions of that group, each session direct-mapped within the line.
//! A key is recorded by writing its tags, replacing whatever was there:
//! each slot keeps its most recent key, as a cache of that shape keeps it.
//! One lookup reads one line, the group's and its sessions' at once — a
//! pick reads one line per candidate owner, as it reads the model's
//! residency. A lookup can be wrong both ways: a key another displaced
//! since reads as absent (two groups sharing a line, two sessions of one
//! group a slot), and two keys with the same slot and tag (one in 2^32 of
//! the groups sharing a line, one in 2^16 of the sessions sharing a slot)
//! as each other. It errs as the server's cache does, which also evicts
//! what it served: the record only orders owners the bounded-load cap and
//! the model's residency allowed already, and a wrong guess costs one
//! prefill.

use std::sync::atomic::{AtomicU16, AtomicU32, Ordering::Relaxed};
use std::sync::OnceLock;

use crate::route::PrefixKey;

/// Lines per backend (a power of two): 16 KiB once the backend served a
/// request with a prefix key. A backend keeps about this many of its most
/// recent groups (fewer where they collide).
pub(crate) const LINES: usize = 256;
/// Session slots in a group's line: a backend keeps about this many of a
/// group's most recent sessions (fewer where they collide).
pub(crate) const SESSIONS: usize = 30;

/// One group's line.
#[derive(Debug, Default)]
#[repr(C, align(64))]
struct Line {
    group: AtomicU32,
    sessions: [AtomicU16; SESSIONS],
}

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
    lines: OnceLock<Box<[Line]>>,
}

impl PrefixRecord {
    /// What the record says of `key`.
    #[inline]
    pub(crate) fn hit(&self, key: &PrefixKey) -> PrefixHit {
        let Some(lines) = self.lines.get() else {
            return PrefixHit::None;
        };
        let line = &lines[line(key.group())];
        let session = key
            .session()
            .is_some_and(|s| line.sessions[slot(s)].load(Relaxed) == session_tag(s));
        if session {
            PrefixHit::Session
        } else if line.group.load(Relaxed) == group_tag(key.group()) {
            PrefixHit::Group
        } else {
            PrefixHit::None
        }
    }

    /// Records that the backend serves `key` (its group, and its session),
    /// and returns what the record said of it before. A tag already in
    /// place is not written: a hot group's line stays shared in every
    /// core's cache.
    #[inline]
    pub(crate) fn note(&self, key: &PrefixKey) -> PrefixHit {
        let lines = self
            .lines
            .get_or_init(|| (0..LINES).map(|_| Line::default()).collect());
        let line = &lines[line(key.group())];
        let group = line.group.load(Relaxed) == group_tag(key.group());
        if !group {
            line.group.store(group_tag(key.group()), Relaxed);
        }
        let session = key.session().map(|s| {
            let slot = &line.sessions[slot(s)];
            let kept = slot.load(Relaxed) == session_tag(s);
            if !kept {
                slot.store(session_tag(s), Relaxed);
            }
            kept
        });
        match session {
            Some(true) => PrefixHit::Session,
            _ if group => PrefixHit::Group,
            _ => PrefixHit::None,
        }
    }
}

fn line(group: u64) -> usize {
    group as usize & (LINES - 1)
}

/// The group's high 32 bits, never 0 (an empty line).
fn group_tag(group: u64) -> u32 {
    ((group >> 32) as u32) | 1
}

fn slot(session: u64) -> usize {
    (session % SESSIONS as u64) as usize
}

/// The session's high 16 bits, never 0 (an empty slot).
fn session_tag(session: u64) -> u16 {
    ((session >> 48) as u16) | 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::route::ModelId;

    fn key(prompt: &str) -> PrefixKey {
        PrefixKey::from_prompt(&ModelId::new("m").unwrap(), prompt.as_bytes())
    }

    #[test]
    fn a_line_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Line>(), 64);
        assert_eq!(std::mem::align_of::<Line>(), 64);
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
    fn a_line_keeps_its_most_recent_group_and_a_slot_its_most_recent_session() {
        let record = PrefixRecord::default();
        // Two groups in one line (found by search: deterministic).
        let a = key("a");
        let b = (0..)
            .map(|i| key(&format!("b{i}")))
            .find(|b| {
                line(b.group()) == line(a.group()) && group_tag(b.group()) != group_tag(a.group())
            })
            .unwrap();
        record.note(&a);
        record.note(&b);
        assert_eq!(record.hit(&b), PrefixHit::Group);
        assert_eq!(record.hit(&a), PrefixHit::None);
        // Two sessions of one group in one slot.
        let s = a.with_session(b"s");
        let t = (0..)
            .map(|i| a.with_session(format!("t{i}").as_bytes()))
            .find(|t| {
                let (t, s) = (t.session().unwrap(), s.session().unwrap());
                slot(t) == slot(s) && session_tag(t) != session_tag(s)
            })
            .unwrap();
        record.note(&s);
        record.note(&t);
        assert_eq!(record.hit(&t), PrefixHit::Session);
        assert_eq!(record.hit(&s), PrefixHit::Group);
    }

    #[test]
    fn a_group_keeps_most_of_its_recent_sessions_and_memory_is_bounded() {
        let record = PrefixRecord::default();
        let group = key("system prompt");
        for i in 0..1000u32 {
            record.note(&group.with_session(&i.to_le_bytes()));
        }
        // Of its last 10 sessions, most are still there.
        let kept = (990..1000u32)
            .filter(|i| record.hit(&group.with_session(&i.to_le_bytes())) == PrefixHit::Session)
            .count();
        assert!(kept >= 6, "{kept}");
        for i in 0..10 * LINES {
            record.note(&key(&i.to_string()).with_session(&i.to_le_bytes()));
        }
        assert_eq!(record.lines.get().map(|l| l.len()), Some(LINES));
        assert_eq!(LINES * std::mem::size_of::<Line>(), 16 * 1024);
    }
}
