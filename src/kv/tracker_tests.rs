//! The tracker's tests: a simulated publisher (numbered batches, a replay
//! buffer) over a lossy, duplicating channel, against a reference fed
//! every batch in order.

use std::collections::HashSet;

use proptest::prelude::*;

use super::*;
use crate::kv::chain::PromptBlocks;

const BS: u32 = 2;

fn id() -> BackendId {
    BackendId::new("vllm-0").unwrap()
}

fn stored(hashes: &[u64], parent: Option<u64>, tokens: &[u32]) -> Event {
    Event::Stored {
        hashes: hashes.iter().copied().map(ExternalHash).collect(),
        parent: parent.map(ExternalHash),
        tokens: tokens.to_vec(),
        block_size: BS,
        lora_name: None,
    }
}

fn removed(hashes: &[u64]) -> Event {
    Event::Removed {
        hashes: hashes.iter().copied().map(ExternalHash).collect(),
    }
}

fn batch(events: Vec<Event>) -> Input {
    Ok(Batch { events, unknown: 0 })
}

fn matched(index: &KvIndex, tokens: &[u32]) -> usize {
    index.matched(&id(), &PromptBlocks::new(tokens, BS))
}

#[test]
fn stored_blocks_chain_through_parents_and_removal_unmatches() {
    let index = KvIndex::new(64);
    let mut tracker = Tracker::new(index.clone(), id(), false);
    assert_eq!(tracker.connected(), Step::Continue);
    let prompt = [1, 2, 3, 4, 5, 6];
    tracker.live(0, batch(vec![stored(&[10, 11], None, &prompt[..4])]));
    tracker.live(1, batch(vec![stored(&[12], Some(11), &prompt[4..])]));
    assert_eq!(matched(&index, &prompt), 3);
    assert_eq!(index.block_size(), Some(BS));
    tracker.live(2, batch(vec![removed(&[11])]));
    assert_eq!(matched(&index, &prompt), 1);
    // A parent unknown to us: skipped, counted.
    tracker.live(3, batch(vec![stored(&[13], Some(99), &[7, 8])]));
    assert_eq!(tracker.stats().blocks_skipped, 1);
    // A block size of another kind, or tokens that do not fill the blocks.
    tracker.live(
        4,
        batch(vec![Event::Stored {
            hashes: vec![ExternalHash(14)],
            parent: None,
            tokens: vec![9, 9, 9],
            block_size: 3,
            lora_name: None,
        }]),
    );
    tracker.live(5, batch(vec![stored(&[15], None, &[9])]));
    assert_eq!(tracker.stats().blocks_skipped, 3);
    // A LoRA adapter's blocks do not match the base model's prompt.
    tracker.live(6, batch(vec![Event::Cleared]));
    tracker.live(
        7,
        batch(vec![Event::Stored {
            hashes: vec![ExternalHash(16)],
            parent: None,
            tokens: vec![1, 2],
            block_size: BS,
            lora_name: Some("sql".into()),
        }]),
    );
    assert_eq!(matched(&index, &prompt), 0);
    assert_eq!(index.blocks(&id()), 1);
    let stats = tracker.stats();
    assert_eq!((stats.batches_applied, stats.clears.server), (8, 1));
}

#[test]
fn a_restart_clears_and_a_gap_without_replay_clears() {
    let index = KvIndex::new(64);
    let mut tracker = Tracker::new(index.clone(), id(), false);
    tracker.connected();
    tracker.live(5, batch(vec![stored(&[1], None, &[1, 2])]));
    tracker.live(6, batch(vec![stored(&[2], None, &[3, 4])]));
    assert_eq!(index.blocks(&id()), 2);
    // Seq 0 again: a new server.
    tracker.live(0, batch(vec![stored(&[3], None, &[5, 6])]));
    assert_eq!(index.blocks(&id()), 1);
    assert_eq!(tracker.stats().clears.restart, 1);
    // 1 and 2 lost, no replay: cleared, and 3 applied.
    tracker.live(3, batch(vec![stored(&[4], None, &[7, 8])]));
    assert_eq!((matched(&index, &[5, 6]), matched(&index, &[7, 8])), (0, 1));
    assert_eq!((tracker.stats().gaps, tracker.stats().clears.lost), (1, 1));
}

#[test]
fn a_gap_is_repaired_by_replay_and_live_copies_are_skipped() {
    let index = KvIndex::new(64);
    let mut tracker = Tracker::new(index.clone(), id(), true);
    assert_eq!(tracker.connected(), Step::Replay(0));
    assert_eq!(tracker.replayed(vec![]), Step::Continue);
    tracker.live(0, batch(vec![stored(&[1], None, &[1, 2])]));
    assert_eq!(
        tracker.live(2, batch(vec![stored(&[3], Some(2), &[5, 6])])),
        Step::Replay(1)
    );
    // vLLM published 3 before it answered the replay.
    let replay = vec![
        (1, batch(vec![stored(&[2], Some(1), &[3, 4])])),
        (2, batch(vec![stored(&[3], Some(2), &[5, 6])])),
        (3, batch(vec![])),
    ];
    assert_eq!(tracker.replayed(replay), Step::Continue);
    assert_eq!(matched(&index, &[1, 2, 3, 4, 5, 6]), 3);
    assert_eq!(tracker.stats().duplicates, 1); // the held 2
                                               // The live copy of 3, after the replay: a duplicate, not a restart.
    assert_eq!(tracker.live(3, batch(vec![])), Step::Continue);
    assert_eq!(tracker.live(4, batch(vec![])), Step::Continue);
    let stats = tracker.stats();
    assert_eq!(
        (stats.duplicates, stats.clears.lost, stats.clears.restart),
        (2, 0, 0)
    );
    assert_eq!(stats.batches_applied, 5);
    // A replay that starts after the expected batch: lost for good.
    assert_eq!(tracker.live(9, batch(vec![])), Step::Replay(5));
    tracker.replayed(vec![
        (6, batch(vec![])),
        (7, batch(vec![])),
        (8, batch(vec![])),
    ]);
    assert_eq!(matched(&index, &[1, 2]), 0);
    assert_eq!(tracker.stats().clears.lost, 1);
}

#[test]
fn a_failed_replay_clears_and_applies_what_was_held() {
    let index = KvIndex::new(64);
    let mut tracker = Tracker::new(index.clone(), id(), true);
    assert_eq!(tracker.connected(), Step::Replay(0));
    // No answer from the replay socket on connecting: nothing to lose yet.
    tracker.live(4, batch(vec![stored(&[1], None, &[1, 2])]));
    assert_eq!(tracker.replay_failed(), Step::Continue);
    assert_eq!(
        (matched(&index, &[1, 2]), tracker.stats().clears.lost),
        (1, 0)
    );
    // A gap whose replay fails: cleared, the held batch applied.
    assert_eq!(
        tracker.live(6, batch(vec![stored(&[2], None, &[3, 4])])),
        Step::Replay(5)
    );
    assert_eq!(tracker.replay_failed(), Step::Continue);
    assert_eq!((matched(&index, &[1, 2]), matched(&index, &[3, 4])), (0, 1));
    assert_eq!(tracker.stats().clears.lost, 1);
    // A stale answer, with no replay under way, is ignored.
    assert_eq!(
        tracker.replayed(vec![(0, batch(vec![Event::Cleared]))]),
        Step::Continue
    );
    assert_eq!(matched(&index, &[3, 4]), 1);
}

#[test]
fn a_malformed_batch_clears_and_the_map_is_bounded() {
    let index = KvIndex::new(4);
    let mut tracker = Tracker::new(index.clone(), id(), false);
    tracker.connected();
    tracker.live(
        0,
        batch(vec![stored(&[1, 2, 3], None, &[1, 2, 3, 4, 5, 6])]),
    );
    assert_eq!(matched(&index, &[1, 2, 3, 4, 5, 6]), 3);
    tracker.live(1, Err(KvDecodeError::for_tests()));
    assert_eq!(matched(&index, &[1, 2]), 0);
    tracker.live(2, batch(vec![stored(&[1, 2, 3, 4, 5], None, &[0; 10])]));
    assert_eq!(tracker.stats().clears.overflow, 1);
    assert_eq!(index.blocks(&id()), 0);
    tracker.live(3, batch(vec![stored(&[7], Some(5), &[0, 0])]));
    assert_eq!(index.blocks(&id()), 0);
}

// === the property ===

/// One batch of the simulated server: events over a pool of vLLM hashes.
#[derive(Clone, Debug)]
enum Op {
    /// `n` blocks under the `parent`-th hash stored so far (or a root).
    Store {
        parent: Option<usize>,
        n: usize,
    },
    Remove(usize),
    Clear,
}

/// What the channel does to a live batch.
#[derive(Clone, Copy, Debug)]
enum Fate {
    Deliver,
    Drop,
    Twice,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (proptest::option::of(0usize..40), 1usize..4)
            .prop_map(|(parent, n)| Op::Store { parent, n }),
        3 => (0usize..40).prop_map(Op::Remove),
        1 => Just(Op::Clear),
    ]
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![6 => Just(Fate::Deliver), 2 => Just(Fate::Drop), 1 => Just(Fate::Twice)]
}

/// The batches of `ops`, the vLLM hashes numbered in order of storage
/// from 1.
fn batches(ops: &[Op]) -> Vec<Batch> {
    let mut next = 1u64;
    ops.iter()
        .map(|op| {
            let event = match *op {
                Op::Store { parent, n } => {
                    let parent = parent
                        .filter(|&p| (p as u64) < next - 1)
                        .map(|p| p as u64 + 1);
                    let hashes: Vec<u64> = (next..next + n as u64).collect();
                    next += n as u64;
                    // Tokens of their own: no two blocks share our hash.
                    let tokens: Vec<u32> = hashes
                        .iter()
                        .flat_map(|&h| [h as u32; BS as usize])
                        .collect();
                    stored(&hashes, parent, &tokens)
                }
                Op::Remove(h) => removed(&[h as u64 + 1]),
                Op::Clear => Event::Cleared,
            };
            Batch {
                events: vec![event],
                unknown: 0,
            }
        })
        .collect()
}

/// A tracker fed every batch in order, and its index.
fn reference(batches: &[Batch]) -> (KvIndex, Tracker) {
    let index = KvIndex::new(4096);
    let mut tracker = Tracker::new(index.clone(), id(), false);
    tracker.connected();
    for (seq, batch) in batches.iter().enumerate() {
        tracker.live(seq as u64, Ok(batch.clone()));
    }
    (index, tracker)
}

fn ours(tracker: &Tracker) -> HashSet<u64> {
    tracker.blocks.values().copied().collect()
}

proptest! {
    /// Batches published before the connection, dropped or doubled on the
    /// way, and replays answered late (after `delay` more live batches):
    /// with vLLM's buffer holding every batch the set ends as the
    /// in-order reference's; with a buffer of `keep` it never holds a
    /// block the reference does not.
    #[test]
    fn replays_repair_what_the_channel_loses(
        ops in proptest::collection::vec(op(), 1..60),
        fates in proptest::collection::vec(fate(), 60),
        early in 0usize..5,
        delay in 0usize..4,
        keep in prop_oneof![Just(usize::MAX), 1usize..8],
    ) {
        let mut all = batches(&ops);
        all.push(Batch::default()); // a last batch, always delivered
        let (reference_index, reference) = reference(&all);
        let index = KvIndex::new(4096);
        let mut tracker = Tracker::new(index.clone(), id(), true);
        let mut asked: Option<(u64, usize)> = None;
        let answer = |from: u64, published: usize| -> Vec<(u64, Input)> {
            let oldest = published.saturating_sub(keep);
            (oldest..published)
                .filter(|&s| s as u64 >= from)
                .map(|s| (s as u64, Ok(all[s].clone())))
                .collect()
        };
        let early = early.min(all.len() - 1);
        if let Step::Replay(from) = tracker.connected() {
            asked = Some((from, 0));
        }
        for seq in early..all.len() {
            let published = seq + 1;
            let last = seq + 1 == all.len();
            let fate = if last { Fate::Deliver } else { fates[seq] };
            let copies = match fate { Fate::Deliver => 1, Fate::Drop => 0, Fate::Twice => 2 };
            for _ in 0..copies {
                if let Step::Replay(from) = tracker.live(seq as u64, Ok(all[seq].clone())) {
                    asked = Some((from, 0));
                }
            }
            if let Some((from, waited)) = asked.take() {
                if waited >= delay || last {
                    if let Step::Replay(next) = tracker.replayed(answer(from, published)) {
                        asked = Some((next, 0));
                    }
                } else {
                    asked = Some((from, waited + 1));
                }
            }
        }
        for _ in 0..all.len() + 2 {
            if let Some((from, _)) = asked.take() {
                if let Step::Replay(next) = tracker.replayed(answer(from, all.len())) {
                    asked = Some((next, 0));
                }
            }
        }
        prop_assert!(asked.is_none(), "replays without end");
        let named: HashSet<u64> = ours(&reference).union(&ours(&tracker)).copied().collect();
        let (set, reference_set) = (index.set(&id()), reference_index.set(&id()));
        let have: HashSet<u64> = named.iter().copied().filter(|&h| set.contains(h)).collect();
        let want: HashSet<u64> =
            named.iter().copied().filter(|&h| reference_set.contains(h)).collect();
        prop_assert_eq!(index.blocks(&id()), have.len());
        if keep == usize::MAX {
            prop_assert_eq!(&have, &want);
            prop_assert_eq!(tracker.stats().clears.lost, 0);
        } else {
            prop_assert!(have.is_subset(&want), "held {:?}, reference {:?}", have, want);
        }
    }
}
