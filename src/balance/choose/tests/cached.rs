//! Routing by the prompt's cached blocks (feature `kv-events`): the
//! backend holding the most leading blocks, within the rules every pick
//! keeps (eligibility, residency, the bounded-load cap), and the same
//! choice in every replica.

use super::*;
use crate::balance::choose::cached::Cached;
use crate::balance::choose::receipt::receipt;
use crate::balance::state::fleet::Settings;
use crate::kv::{KvIndex, PromptBlocks};
use crate::route::Route;

/// `n` backends whose blocks `index` holds.
fn indexed_table(n: usize, index: &KvIndex) -> Table {
    let fleet = Fleet {
        settings: Settings {
            kv_index: Some(index.clone()),
            ..Settings::default()
        },
        ..Fleet::new()
    };
    table_in(n, Arc::new(fleet))
}

/// A prompt of `blocks` blocks of 4 tokens, from `seed`.
fn prompt(seed: u32, blocks: usize) -> PromptBlocks {
    let tokens: Vec<u32> = (0..4 * blocks as u32).map(|t| seed * 1000 + t).collect();
    PromptBlocks::new(&tokens, 4)
}

/// Backend `i` holds the first `n` blocks of `p`.
fn hold(t: &Table, i: usize, p: &PromptBlocks, n: usize) {
    let set = t.backends[i].blocks.as_ref().unwrap();
    for &h in &p.hashes()[..n] {
        set.insert(h);
    }
}

/// The pick of `r` carrying `p`, with its receipt.
fn pick_with(t: &Table, r: &RouteInfo, p: &PromptBlocks) -> (Pick, crate::balance::RoutingReceipt) {
    let mut extensions = http::Extensions::new();
    extensions.insert(r.clone());
    extensions.insert(p.clone());
    let headers = http::HeaderMap::new();
    let view = Route::from_parts(&extensions, &headers).unwrap();
    let ask = Ask {
        cached: Cached::of(t, &view),
        ..ask(r, 1)
    };
    let now = Now::lazy();
    let picked = pick(t, &ask, &RULES, &now, &mut || 0, &mut Scratch::default()).unwrap();
    let receipt = receipt(t, &ask, &view, &picked, &now);
    (picked, receipt)
}

#[tokio::test(start_paused = true)]
async fn the_backend_holding_the_most_leading_blocks_takes_the_request() {
    let index = KvIndex::new(1024);
    let t = indexed_table(4, &index);
    let r = route("tiny");
    for i in 0..4 {
        make_resident(&t, i, &r);
    }
    let p = prompt(1, 10);
    let owner = walk(&t, &r)[0];
    let (a, b) = ((owner + 1) % 4, (owner + 2) % 4);
    hold(&t, a, &p, 3);
    hold(&t, b, &p, 8);
    let (picked, receipt) = pick_with(&t, &r, &p);
    assert_eq!((picked.index, picked.branch), (b, Branch::CachedBlocks));
    let held = receipt.cached_blocks.clone().unwrap();
    assert_eq!((held.total, held.held), (10, 8));
    assert_eq!(held.runner_up, Some((t.backends[a].id.clone(), 3)));
    assert!(
        receipt
            .to_string()
            .ends_with(&format!("blocks=8/10; blocks_runner_up=b{a}:3")),
        "{receipt}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_block_held_without_its_prefix_does_not_count() {
    let index = KvIndex::new(1024);
    let t = indexed_table(2, &index);
    let r = route("tiny");
    make_resident(&t, 0, &r);
    make_resident(&t, 1, &r);
    let p = prompt(2, 4);
    let set = t.backends[1].blocks.as_ref().unwrap();
    for &h in &p.hashes()[1..] {
        set.insert(h); // every block but the first
    }
    let (picked, receipt) = pick_with(&t, &r, &p);
    assert_ne!(picked.branch, Branch::CachedBlocks);
    assert_eq!(receipt.cached_blocks.unwrap().runner_up, None);
}

#[tokio::test(start_paused = true)]
async fn a_holder_out_of_the_running_gives_way_to_the_next() {
    let index = KvIndex::new(1024);
    let t = indexed_table(3, &index);
    let r = route("tiny");
    for i in 0..3 {
        make_resident(&t, i, &r);
    }
    let p = prompt(3, 6);
    hold(&t, 0, &p, 6);
    hold(&t, 1, &p, 2);
    trip(&t, 0); // breaker open
    assert_eq!(pick_with(&t, &r, &p).0.index, 1);
    // Over the bounded-load cap: the next holder, else today's path.
    let t = indexed_table(3, &KvIndex::new(1024));
    for i in 0..3 {
        make_resident(&t, i, &r);
    }
    hold(&t, 0, &p, 6);
    set_load(&t, 0, 10);
    let (picked, _) = pick_with(&t, &r, &p);
    assert_ne!(picked.index, 0, "over the cap");
    assert_ne!(picked.branch, Branch::CachedBlocks);
}

#[tokio::test(start_paused = true)]
async fn a_holder_without_the_model_resident_is_not_chosen_for_its_blocks() {
    let t = indexed_table(2, &KvIndex::new(1024));
    let r = route("tiny");
    make_resident(&t, 0, &r);
    let p = prompt(4, 3);
    hold(&t, 1, &p, 3);
    let (picked, _) = pick_with(&t, &r, &p);
    assert_eq!(picked.index, 0);
}

#[tokio::test(start_paused = true)]
async fn a_backend_that_leaves_forgets_its_blocks() {
    let t = indexed_table(2, &KvIndex::new(1024));
    let r = route("tiny");
    make_resident(&t, 0, &r);
    make_resident(&t, 1, &r);
    let p = prompt(5, 3);
    hold(&t, 1, &p, 3);
    assert_eq!(pick_with(&t, &r, &p).0.index, 1);
    t.backends[1].leave(); // ejected: it may come back restarted, empty
    let (picked, receipt) = pick_with(&t, &r, &p);
    assert_ne!(picked.branch, Branch::CachedBlocks);
    assert_eq!(receipt.cached_blocks.unwrap().held, 0);
}

proptest! {
    /// Two replicas whose indexes hold the same blocks choose the same
    /// backend, whatever order their tables list the backends in.
    #[test]
    fn replicas_with_the_same_blocks_choose_the_same_backend(
        held in proptest::collection::vec(0usize..5, 4),
        seed in 0u32..1000,
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        runtime.block_on(async {
            let r = route("tiny");
            let p = prompt(seed, 4);
            let (ta, tb) = (indexed_table(4, &KvIndex::new(64)), indexed_table(4, &KvIndex::new(64)));
            for (i, &n) in held.iter().enumerate() {
                make_resident(&ta, i, &r);
                make_resident(&tb, i, &r);
                hold(&ta, i, &p, n);
                hold(&tb, i, &p, n);
            }
            let (a, b) = (pick_with(&ta, &r, &p).0, pick_with(&tb, &r, &p).0);
            prop_assert_eq!(&ta.backends[a.index].id, &tb.backends[b.index].id);
            // The backend chosen holds the most (by the index, or as
            // today's affinity's own choice when it holds as many).
            prop_assert_eq!(held[a.index], *held.iter().max().unwrap());
            Ok(())
        })?;
    }
}

#[tokio::test(start_paused = true)]
async fn blocks_as_many_hold_as_today_s_choice_draw_no_request() {
    let t = indexed_table(4, &KvIndex::new(1024));
    let r = route("tiny");
    let p = prompt(6, 5);
    for i in 0..4 {
        make_resident(&t, i, &r);
        hold(&t, i, &p, 1); // a system prompt every backend has cached
    }
    let (picked, receipt) = pick_with(&t, &r, &p);
    assert_eq!(
        picked.branch,
        Branch::ResidentOwner,
        "routed as without the index"
    );
    assert_eq!(picked.index, walk(&t, &r)[0]);
    assert_eq!(receipt.cached_blocks.unwrap().held, 1);
}

#[tokio::test(start_paused = true)]
async fn a_prompt_no_backend_holds_past_a_shared_part_is_keyed_by_its_first_new_block() {
    let index = KvIndex::new(1024);
    let t = indexed_table(4, &index);
    let p = prompt(7, 4);
    for i in 0..4 {
        hold(&t, i, &p, 1);
    }
    let mut extensions = http::Extensions::new();
    extensions.insert(route("tiny"));
    extensions.insert(p.clone());
    let headers = http::HeaderMap::new();
    let view = Route::from_parts(&extensions, &headers).unwrap();
    let cached = Cached::of(&t, &view);
    assert_eq!(
        cached.divergent,
        p.hashes()[1],
        "the first block no backend holds"
    );
    hold(&t, 2, &p, 4);
    assert_eq!(
        Cached::of(&t, &view).divergent,
        p.hashes()[3],
        "all held: the last"
    );
}
