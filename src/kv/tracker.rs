//! One backend's KV-cache events applied in order to its block set: the
//! map from vLLM's block hashes to the crate's own, and the sequence
//! numbers that find lost batches (pure logic: the IO feeds it batches
//! and does the replays it asks for).
//!
//! # Sequence numbers
//!
//! vLLM numbers its batches from 0 and keeps the last 10,000 for replay.
//! [`Tracker`] holds the next number it expects:
//!
//! * the expected one is applied;
//! * a later one is a gap: with a replay endpoint the tracker asks the IO
//!   for a replay from the expected number ([`Step::Replay`]) and *buffers*
//!   live batches until it comes (up to [`MAX_PENDING`], the oldest dropped
//!   past that: the replay, or the next one, fetches them again), so
//!   nothing is cleared when the replay repairs the gap; without one, the
//!   lost batches are gone: the backend's set is cleared and the tracker
//!   goes on from the batch at hand;
//! * a replay that starts after the expected number (vLLM no longer holds
//!   it) clears the set and goes on from what it gives;
//! * an earlier one is a server restarted (its numbers start at 0 again):
//!   the set is cleared and the batch taken as the new history's (a replay
//!   from 0 asked for if it is not 0) — except the live copies of batches
//!   a replay just gave, which the live socket may still deliver until it
//!   catches up (one TCP stream: ordered), and live batches held during a
//!   replay older than what it gave, skipped as duplicates.
//!
//! Each (re)connection starts over ([`Tracker::connected`]): the set is
//! cleared, and the first batch seen (or the replay from 0) starts the
//! history.
//!
//! # Blocks
//!
//! A `BlockStored` event's blocks are hashed with [`block_hash`] down the
//! chain from their parent's hash (ours, found by vLLM's hash), or from
//! [`ROOT`] for a sequence's first block — from a root of the adapter's
//! name for a LoRA adapter's, which no [`PromptBlocks`](super::PromptBlocks)
//! of a base model matches. Skipped, and counted: an event whose parent
//! the tracker does not know (it cannot chain it), whose block size is not
//! the index's, or whose tokens are not its blocks' count times the block
//! size. The map is bounded by [`KvIndex::blocks_per_backend`]: past it,
//! the backend's set and map are cleared (counted): the set errs toward
//! "not cached", which costs a prefill, never a wrong answer.
//!
//! Blocks vLLM keys by more than their tokens (multimodal inputs, a cache
//! salt: its `extra_keys`) are hashed here by their tokens alone: such a
//! block may match a prompt of the same tokens that vLLM would not reuse
//! (a wasted affinity, not a wrong answer).

use std::collections::{HashMap, VecDeque};
use std::ops::RangeInclusive;
use std::sync::Arc;

use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::chain::{block_hash, ROOT};
use super::events::{Batch, Event, ExternalHash, KvDecodeError};
use super::index::KvIndex;
use super::set::BlockSet;
use crate::backend::BackendId;

/// Live batches held while a replay is under way, at most (vLLM's replay
/// buffer holds 10,000).
pub(crate) const MAX_PENDING: usize = 16_384;

/// A batch as the IO hands it over: decoded, or why not.
pub(crate) type Input = Result<Batch, KvDecodeError>;

/// What the IO does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Nothing: go on receiving.
    Continue,
    /// Ask the replay endpoint for every batch from this number on (and
    /// drop any replay under way), then hand them to [`Tracker::replayed`].
    Replay(u64),
}

/// Why a backend's set was cleared, counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Clears {
    /// A (re)connection to the publisher.
    pub(crate) connect: u64,
    /// The server's `AllBlocksCleared`.
    pub(crate) server: u64,
    /// The sequence numbers started over: the server restarted.
    pub(crate) restart: u64,
    /// Batches lost for good (no replay, or gone from vLLM's buffer), or
    /// a batch that did not decode.
    pub(crate) lost: u64,
    /// The map outgrew [`KvIndex::blocks_per_backend`].
    pub(crate) overflow: u64,
}

/// The tracker's counters (for tests and metrics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TrackerStats {
    /// Batches applied.
    pub(crate) batches_applied: u64,
    /// Batches that did not decode.
    pub(crate) batches_malformed: u64,
    /// Live copies of replayed batches, skipped.
    pub(crate) duplicates: u64,
    /// Gaps in the sequence numbers seen live.
    pub(crate) gaps: u64,
    /// Replays asked for (the first one on each connection included).
    pub(crate) replays: u64,
    /// Live batches dropped from a full buffer during a replay.
    pub(crate) pending_dropped: u64,
    /// Clears, by reason.
    pub(crate) clears: Clears,
    /// Blocks stored, removed.
    pub(crate) blocks_stored: u64,
    pub(crate) blocks_removed: u64,
    /// Blocks of skipped `BlockStored` events.
    pub(crate) blocks_skipped: u64,
    /// Events of types the crate does not know.
    pub(crate) events_unknown: u64,
}

enum State {
    Live,
    Replaying { pending: VecDeque<(u64, Input)> },
}

/// One backend's events applied to its set in [`KvIndex`].
pub(crate) struct Tracker {
    index: KvIndex,
    backend: BackendId,
    set: Arc<BlockSet>,
    /// vLLM's hash → ours.
    blocks: HashMap<ExternalHash, u64>,
    /// The next sequence number; `None`: take whichever comes.
    expected: Option<u64>,
    /// Whether the publisher has a replay endpoint.
    can_replay: bool,
    state: State,
    /// The numbers the last replay gave, until the live socket caught up.
    replayed: Option<RangeInclusive<u64>>,
    stats: TrackerStats,
}

impl Tracker {
    /// A tracker writing backend `backend`'s set in `index`; `can_replay`:
    /// whether the publisher has a replay endpoint.
    pub(crate) fn new(index: KvIndex, backend: BackendId, can_replay: bool) -> Self {
        let set = index.set(&backend);
        Self {
            index,
            backend,
            set,
            blocks: HashMap::new(),
            expected: None,
            can_replay,
            state: State::Live,
            replayed: None,
            stats: TrackerStats::default(),
        }
    }

    /// The counters.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn stats(&self) -> TrackerStats {
        self.stats
    }

    /// The backend this tracker writes.
    pub(crate) fn backend(&self) -> &BackendId {
        &self.backend
    }

    /// The socket (re)connected: the server may have restarted with an
    /// empty cache, so the set is cleared and the history starts over,
    /// from a replay from 0 when there is a replay endpoint.
    pub(crate) fn connected(&mut self) -> Step {
        self.clear();
        self.stats.clears.connect += 1;
        self.expected = None;
        self.replayed = None;
        self.state = State::Live;
        self.replay_from(0, VecDeque::new())
    }

    /// A live batch, numbered `seq`.
    pub(crate) fn live(&mut self, seq: u64, batch: Input) -> Step {
        self.take(seq, batch, false)
    }

    /// A live batch, now or `held` during a replay: a held batch older
    /// than the history the replay gave is stale, not a restart.
    fn take(&mut self, seq: u64, batch: Input, held: bool) -> Step {
        if let State::Replaying { pending } = &mut self.state {
            if pending.len() >= MAX_PENDING {
                pending.pop_front();
                self.stats.pending_dropped += 1;
            }
            pending.push_back((seq, batch));
            return Step::Continue;
        }
        match self.expected {
            Some(expected) if seq > expected => {
                self.stats.gaps += 1;
                if self.can_replay {
                    return self.replay_from(expected, VecDeque::from([(seq, batch)]));
                }
                self.lost();
                self.apply(seq, batch);
            }
            Some(expected) if seq < expected => {
                if held || self.replayed.as_ref().is_some_and(|r| r.contains(&seq)) {
                    self.stats.duplicates += 1;
                    return Step::Continue;
                }
                // The numbers started over: a new server's history.
                self.clear();
                self.stats.clears.restart += 1;
                self.replayed = None;
                self.expected = Some(0);
                return self.take(seq, batch, false);
            }
            _ => {
                self.replayed = None;
                self.apply(seq, batch);
            }
        }
        Step::Continue
    }

    /// A replay's answer, every batch from the number asked for on, in
    /// order. Ignored unless a replay is under way.
    pub(crate) fn replayed(&mut self, batches: Vec<(u64, Input)>) -> Step {
        let State::Replaying { pending } = std::mem::replace(&mut self.state, State::Live) else {
            return Step::Continue;
        };
        let first = batches.first().map(|(seq, _)| *seq);
        if let Some(expected) = self.expected {
            // The first batch vLLM still holds is after the one we need,
            // or it holds none from there (we saw a later one live).
            if first.is_none_or(|first| first > expected) {
                self.lost();
            }
        }
        if let (Some(first), Some((last, _))) = (first, batches.last()) {
            self.replayed = Some(first..=*last);
        }
        for (seq, batch) in batches {
            match self.expected {
                Some(expected) if seq < expected => self.stats.duplicates += 1,
                Some(expected) if seq > expected => {
                    self.lost();
                    self.apply(seq, batch);
                }
                _ => self.apply(seq, batch),
            }
        }
        self.drain(pending)
    }

    /// The replay failed (no answer, or not one of vLLM's): what it was
    /// to repair is lost.
    pub(crate) fn replay_failed(&mut self) -> Step {
        let State::Replaying { pending } = std::mem::replace(&mut self.state, State::Live) else {
            return Step::Continue;
        };
        if self.expected.is_some() {
            self.lost();
        }
        self.drain(pending)
    }

    /// Live batches held during a replay, as if they came now.
    fn drain(&mut self, mut pending: VecDeque<(u64, Input)>) -> Step {
        while let Some((seq, batch)) = pending.pop_front() {
            if let Step::Replay(from) = self.take(seq, batch, true) {
                if let State::Replaying { pending: held } = &mut self.state {
                    held.extend(pending);
                }
                return Step::Replay(from);
            }
        }
        Step::Continue
    }

    fn replay_from(&mut self, from: u64, pending: VecDeque<(u64, Input)>) -> Step {
        if !self.can_replay {
            return Step::Continue;
        }
        self.stats.replays += 1;
        self.state = State::Replaying { pending };
        Step::Replay(from)
    }

    /// Batches lost for good: what the set holds may be stale.
    fn lost(&mut self) {
        self.clear();
        self.stats.clears.lost += 1;
        self.expected = None;
    }

    fn clear(&mut self) {
        self.set.clear();
        self.blocks.clear();
    }

    fn apply(&mut self, seq: u64, batch: Input) {
        self.expected = Some(seq.wrapping_add(1));
        let batch = match batch {
            Ok(batch) => batch,
            Err(error) => {
                tracing::warn!(backend = %self.backend.as_str(), seq, %error, "KV-cache events lost");
                self.stats.batches_malformed += 1;
                self.clear();
                self.stats.clears.lost += 1;
                return;
            }
        };
        self.stats.batches_applied += 1;
        self.stats.events_unknown += batch.unknown as u64;
        for event in batch.events {
            match event {
                Event::Stored {
                    hashes,
                    parent,
                    tokens,
                    block_size,
                    lora_name,
                } => self.store(&hashes, parent, &tokens, block_size, lora_name.as_deref()),
                Event::Removed { hashes } => {
                    for hash in hashes {
                        if let Some(ours) = self.blocks.remove(&hash) {
                            self.set.remove(ours);
                            self.stats.blocks_removed += 1;
                        }
                    }
                }
                Event::Cleared => {
                    self.clear();
                    self.stats.clears.server += 1;
                }
            }
        }
    }

    fn store(
        &mut self,
        hashes: &[ExternalHash],
        parent: Option<ExternalHash>,
        tokens: &[u32],
        block_size: u32,
        lora_name: Option<&str>,
    ) {
        let parent = match parent {
            None => Some(root(lora_name)),
            Some(parent) => self.blocks.get(&parent).copied(),
        };
        let shaped = block_size > 0
            && (hashes.len() as u64).checked_mul(u64::from(block_size))
                == Some(tokens.len() as u64);
        let (Some(mut parent), true) = (parent, shaped && self.index.learn_block_size(block_size))
        else {
            self.stats.blocks_skipped += hashes.len() as u64;
            return;
        };
        for (hash, block) in hashes.iter().zip(tokens.chunks_exact(block_size as usize)) {
            parent = block_hash(parent, block);
            self.blocks.insert(*hash, parent);
            self.set.insert(parent);
            self.stats.blocks_stored += 1;
        }
        if self.blocks.len() > self.index.blocks_per_backend() {
            tracing::warn!(
                backend = %self.backend.as_str(),
                blocks = self.blocks.len(),
                "KV-cache block map full: cleared"
            );
            self.clear();
            self.stats.clears.overflow += 1;
        }
    }
}

/// The parent of a sequence's first block: [`ROOT`], or for a LoRA
/// adapter's blocks a root of the adapter's name.
fn root(lora_name: Option<&str>) -> u64 {
    match lora_name {
        None => ROOT,
        Some(name) => xxh3_64_with_seed(name.as_bytes(), ROOT).max(1),
    }
}

#[cfg(test)]
#[path = "tracker_tests.rs"]
mod tests;
