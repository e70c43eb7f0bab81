//! Picks for requests with a prefix key: the group's own walk, the model's
//! residency first, then the backends that served its session or group,
//! under the bounded-load cap; and the receipt.

use super::*;
use crate::balance::choose::receipt::receipt;
use crate::balance::receipt::RouteReason;
use crate::balance::state::prefix::PrefixHit;
use crate::route::PrefixKey;

fn prefixed(prompt: &str) -> RouteInfo {
    let r = route("llama");
    let key = PrefixKey::from_prompt(&r.model, prompt.as_bytes());
    r.with_prefix(key)
}

fn group_walk(table: &Table, route: &RouteInfo) -> Vec<usize> {
    table.ring.walk(route.prefix.unwrap().group()).collect()
}

/// Every backend serves the model; the five past the group's first three
/// owners carry 4 requests each, so the cap is ceil(1.25 × 21 / 8) = 4.
fn busy_fleet(r: &RouteInfo) -> (Table, Vec<usize>) {
    let t = table(8);
    for i in 0..8 {
        make_resident(&t, i, r);
    }
    let order = group_walk(&t, r);
    for &i in &order[3..] {
        set_load(&t, i, 4);
    }
    (t, order)
}

#[tokio::test(start_paused = true)]
async fn a_prefix_group_routes_by_its_own_walk() {
    let t = table(8);
    let a = prefixed("system: you are a tax assistant");
    for i in 0..8 {
        make_resident(&t, i, &a);
    }
    // Groups whose walks start elsewhere than the model's.
    let model_first = walk(&t, &route("llama"))[0];
    let other = (0..)
        .map(|i| prefixed(&format!("document {i}")))
        .find(|r| group_walk(&t, r)[0] != model_first)
        .unwrap();
    let picked = pick_with(&t, &ask(&other, 1), &mut || 0).unwrap();
    assert_eq!(picked.index, group_walk(&t, &other)[0]);
    assert_eq!(picked.branch, Branch::ResidentOwner);
    assert_eq!(picked.hit, PrefixHit::None, "nothing served it yet");
    // The pick recorded it there.
    let again = pick_with(&t, &ask(&other, 1), &mut || 0).unwrap();
    assert_eq!((again.index, again.hit), (picked.index, PrefixHit::Group));
}

#[tokio::test(start_paused = true)]
async fn the_owner_that_served_the_session_comes_first_then_the_group() {
    let r = prefixed("system: you are a tax assistant");
    let (t, order) = busy_fleet(&r);
    let turn = |s: &str| {
        let key = r.prefix.unwrap().with_session(s.as_bytes());
        route("llama").with_prefix(key)
    };
    // The third owner, busier than the other two, served conversation 1.
    set_load(&t, order[2], 2);
    t.backends[order[2]]
        .prefixes
        .note(&turn("conv-1").prefix.unwrap());
    for random in [0, 1, 2, 7] {
        let picked = pick_with(&t, &ask(&turn("conv-1"), 3), &mut || random).unwrap();
        assert_eq!((picked.index, picked.hit), (order[2], PrefixHit::Session));
        drop(picked);
    }
    // Conversation 2 of the same group: the group's backend.
    let picked = pick_with(&t, &ask(&turn("conv-2"), 3), &mut || 0).unwrap();
    assert_eq!((picked.index, picked.hit), (order[2], PrefixHit::Group));
    // A conversation of the second owner: there, though busier still.
    set_load(&t, order[1], 3);
    t.backends[order[1]]
        .prefixes
        .note(&turn("conv-3").prefix.unwrap());
    let picked = pick_with(&t, &ask(&turn("conv-3"), 3), &mut || 0).unwrap();
    assert_eq!((picked.index, picked.hit), (order[1], PrefixHit::Session));
}

#[tokio::test(start_paused = true)]
async fn the_cap_spreads_a_hot_prefix_over_its_owners() {
    let r = prefixed("system: you are a tax assistant");
    let (t, order) = busy_fleet(&r);
    t.backends[order[0]].prefixes.note(&r.prefix.unwrap());
    // At the cap: another owner takes it, and learns the group.
    set_load(&t, order[0], 4);
    let picked = pick_with(&t, &ask(&r, 3), &mut || 0).unwrap();
    assert!(picked.index == order[1] || picked.index == order[2]);
    assert_eq!(picked.hit, PrefixHit::None);
    assert_eq!(
        t.backends[picked.index].prefixes.hit(&r.prefix.unwrap()),
        PrefixHit::Group
    );
}

#[tokio::test(start_paused = true)]
async fn the_models_residency_comes_before_the_prefix_record() {
    let t = table(8);
    let r = prefixed("system: you are a tax assistant");
    let order = group_walk(&t, &r);
    // The first owner served the group but no longer holds the model; the
    // second serves the model.
    t.backends[order[0]].prefixes.note(&r.prefix.unwrap());
    make_resident(&t, order[1], &r);
    let picked = pick_with(&t, &ask(&r, 2), &mut || 0).unwrap();
    assert_eq!(
        (picked.index, picked.branch),
        (order[1], Branch::ResidentOwner)
    );
    assert_eq!(picked.hit, PrefixHit::None);
    // With the model on neither, the group's first owner loads it.
    let t = table(8);
    let picked = pick_with(&t, &ask(&r, 2), &mut || 0).unwrap();
    assert_eq!((picked.index, picked.branch), (order[0], Branch::ColdOwner));
}

#[tokio::test(start_paused = true)]
async fn a_receipt_names_the_reason_the_owners_the_hit_and_the_runner_up() {
    let r = prefixed("system: you are a tax assistant");
    let (t, order) = busy_fleet(&r);
    t.backends[order[1]].prefixes.note(&r.prefix.unwrap());
    let a = ask(&r, 3);
    let picked = pick_with(&t, &a, &mut || 0).unwrap();
    let now = Now::lazy();
    let receipt = receipt(&t, &a, &crate::route::Route::from(&r), &picked, &now);
    assert_eq!(receipt.backend, t.backends[order[1]].id);
    assert_eq!(receipt.reason, RouteReason::ResidentOwner);
    assert_eq!(receipt.owners, 3);
    assert_eq!(receipt.prefix_hit, PrefixHit::Group);
    // Another idle owner serving the model ranks next.
    let runner_up = receipt.runner_up.clone().unwrap();
    assert!(runner_up == t.backends[order[0]].id || runner_up == t.backends[order[2]].id);
    assert!(receipt.to_string().starts_with(&format!(
        "backend=b{}; reason=resident_owner; owners=3; prefix_hit=group; runner_up=b",
        order[1]
    )));
    assert!(receipt.header_value().to_str().is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_spilled_conversation_goes_where_it_spilled_before() {
    let t = table(8);
    let r = prefixed("system: you are a tax assistant");
    for i in 0..8 {
        make_resident(&t, i, &r);
    }
    let order = group_walk(&t, &r);
    // Both owners at the cap (ceil(1.25 × 17 / 8) = 3), the rest idle.
    set_load(&t, order[0], 8);
    set_load(&t, order[1], 8);
    let turn = route("llama").with_prefix(r.prefix.unwrap().with_session(b"conv-9"));
    // Its last turn spilled to the third backend past the owners.
    t.backends[order[4]].prefixes.note(&turn.prefix.unwrap());
    let picked = pick_with(&t, &ask(&turn, 2), &mut || 0).unwrap();
    assert_eq!((picked.index, picked.branch), (order[4], Branch::Spill));
    assert_eq!(picked.hit, PrefixHit::Session);
    // Another conversation of the group: where the group spilled, not the
    // first backend past the owners (`order[2]`).
    let other = route("llama").with_prefix(r.prefix.unwrap().with_session(b"conv-10"));
    let picked = pick_with(&t, &ask(&other, 2), &mut || 0).unwrap();
    assert_eq!((picked.index, picked.hit), (order[4], PrefixHit::Group));
}
