//! Inference picks: owners, residency, the cap, spills, urgency.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_cold_model_goes_to_its_primary_and_is_resident_there_after() {
    let t = table(6);
    let r = route("llama");
    let order = walk(&t, &r);
    assert_eq!(
        pick_now(&t, &ask(&r, 2)),
        Some((order[0], Branch::ColdOwner))
    );
    assert_eq!(
        pick_now(&t, &ask(&r, 2)),
        Some((order[0], Branch::ResidentOwner)),
        "the pick marked it resident"
    );
    assert!(!t.backends[order[1]].residency.contains(r.model.hash64()));
}

#[tokio::test(start_paused = true)]
async fn a_resident_owner_is_preferred_to_a_cold_primary() {
    let t = table(6);
    let r = route("llama");
    let order = walk(&t, &r);
    make_resident(&t, order[1], &r);
    assert_eq!(
        pick_now(&t, &ask(&r, 2)),
        Some((order[1], Branch::ResidentOwner))
    );
    // ... but not one past the owners while an owner is under the cap.
    let t = table(6);
    make_resident(&t, order[2], &r);
    assert_eq!(
        pick_now(&t, &ask(&r, 2)),
        Some((order[0], Branch::ColdOwner))
    );
}

#[tokio::test(start_paused = true)]
async fn between_two_resident_owners_the_cheaper_one_wins() {
    let t = table(6);
    let r = route("llama");
    let order = walk(&t, &r);
    make_resident(&t, order[0], &r);
    make_resident(&t, order[1], &r);
    set_load(&t, order[0], 1);
    assert_eq!(
        pick_now(&t, &ask(&r, 2)),
        Some((order[1], Branch::ResidentOwner)),
        "fewer in flight"
    );
}

/// Two resident owners with as many in flight (one request at a time):
/// the cheaper every time (issue 50; it was a draw weighted by inverse
/// cost) — costs within the tie band split evenly at random, a slower
/// one takes nothing, and nothing goes off the owners.
#[tokio::test(start_paused = true)]
async fn between_two_idle_resident_owners_the_cheaper_takes_the_request() {
    let t = table(6);
    let r = route("llama");
    let order = walk(&t, &r);
    make_resident(&t, order[0], &r);
    make_resident(&t, order[1], &r);
    let mut random = lcg(5);
    let mut share_of_first = || {
        let mut first = 0;
        for _ in 0..1_000 {
            let p = pick_with(&t, &ask(&r, 2), &mut random).unwrap();
            assert!(p.index == order[0] || p.index == order[1], "off the owners");
            first += usize::from(p.index == order[0]);
        }
        first
    };
    let equal = share_of_first();
    assert!((450..=550).contains(&equal), "equal: {equal} of 1,000");
    // 30 → 32 ms (the first answer sets the estimate): within the band.
    let other = &t.backends[order[1]].latency;
    other.record(Duration::from_millis(32), Outcome::Success);
    let close = share_of_first();
    assert!((450..=550).contains(&close), "7% slower: {close} of 1,000");
    // 32 → 38 ms: 27% slower, outside the band.
    other.record(Duration::from_millis(62), Outcome::Success);
    assert_eq!(share_of_first(), 1_000, "the other slower");
}

#[tokio::test(start_paused = true)]
async fn an_owner_at_the_load_cap_is_passed_over() {
    let t = table(6);
    let r = route("llama");
    let order = walk(&t, &r);
    make_resident(&t, order[0], &r);
    make_resident(&t, order[1], &r);
    // 15 in flight over 6 backends: cap = ceil(1.25 × 16 / 6) = 4.
    for &i in &order[2..] {
        set_load(&t, i, 3);
    }
    set_load(&t, order[0], 4);
    set_load(&t, order[1], 0);
    assert_eq!(load_cap(&t, 1.25), 4);
    assert_eq!(
        pick_now(&t, &ask(&r, 2)),
        Some((order[1], Branch::ResidentOwner))
    );
    set_load(&t, order[1], 4);
    set_load(&t, order[0], 3);
    assert_eq!(
        pick_now(&t, &ask(&r, 2)),
        Some((order[0], Branch::ResidentOwner))
    );
}

#[tokio::test(start_paused = true)]
async fn with_every_owner_at_the_cap_the_request_spills_warm_first() {
    let t = table(6);
    let r = route("llama");
    let order = walk(&t, &r);
    make_resident(&t, order[0], &r);
    set_load(&t, order[0], 4);
    set_load(&t, order[1], 4);
    // 8 in flight: cap = ceil(1.25 × 9 / 6) = 2.
    make_resident(&t, order[4], &r);
    assert_eq!(
        pick_now(&t, &ask(&r, 2)),
        Some((order[4], Branch::Spill)),
        "a backend past the owners with the model resident"
    );
    // Nowhere warm with room, and the owner's copy just sent (it may still
    // be loading): the first backend along the ring where loading a second
    // copy evicts nothing.
    let t = table(6);
    make_resident(&t, order[0], &r);
    set_load(&t, order[0], 4);
    set_load(&t, order[1], 4);
    fill_slots(&t, order[2]);
    assert_eq!(pick_now(&t, &ask(&r, 2)), Some((order[3], Branch::Spill)));
    // Once the owner's copy has long been loaded, its queue is the cheaper
    // wait: no cold copy for a passing burst.
    let t = table(6);
    make_resident(&t, order[0], &r);
    set_load(&t, order[0], 4);
    set_load(&t, order[1], 4);
    tokio::time::advance(std::time::Duration::from_secs(3)).await;
    assert_eq!(
        pick_now(&t, &ask(&r, 2)),
        Some((order[0], Branch::ResidentOwner))
    );
    // Every backend's slots full: a cold load would evict a model in use;
    // the request waits on its resident owner instead.
    for i in 0..6 {
        fill_slots(&t, i);
    }
    make_resident(&t, order[0], &r);
    assert_eq!(
        pick_now(&t, &ask(&r, 2)),
        Some((order[0], Branch::ResidentOwner))
    );
}

#[tokio::test(start_paused = true)]
async fn open_breakers_are_skipped_then_the_request_spills() {
    let t = table(5);
    let r = route("resnet");
    let order = walk(&t, &r);
    trip(&t, order[0]);
    assert_eq!(
        pick_now(&t, &ask(&r, 2)),
        Some((order[1], Branch::ColdOwner))
    );
    trip(&t, order[1]);
    assert_eq!(pick_now(&t, &ask(&r, 2)), Some((order[2], Branch::Spill)));
}

#[tokio::test(start_paused = true)]
async fn below_the_panic_threshold_every_backend_is_routable() {
    let t = table(4);
    let r = route("resnet");
    let order = walk(&t, &r);
    trip(&t, order[0]);
    assert_eq!(pick_now(&t, &ask(&r, 1)).unwrap().1, Branch::Spill);
    trip(&t, order[1]);
    trip(&t, order[2]);
    // 1 of 4 eligible, under 50%: panic, breakers bypassed.
    assert_eq!(pick_now(&t, &ask(&r, 1)), Some((order[0], Branch::Panic)));
    let no_panic = Rules {
        panic_threshold: 0.0,
        ..RULES
    };
    let mut no_random = || unreachable!();
    let p = pick(
        &t,
        &ask(&r, 1),
        &no_panic,
        &Now::lazy(),
        &mut no_random,
        &mut Scratch::default(),
    )
    .unwrap();
    assert_eq!((p.index, p.branch), (order[3], Branch::Spill));
    trip(&t, order[3]);
    let none = pick(
        &t,
        &ask(&r, 1),
        &no_panic,
        &Now::lazy(),
        &mut no_random,
        &mut Scratch::default(),
    );
    assert!(matches!(none, Err(Miss::NoBackend)));
}

#[tokio::test(start_paused = true)]
async fn high_urgency_takes_the_cheapest_resident_owner_without_sampling() {
    let t = table(8);
    let r = route("llama").with_urgency(Urgency::High);
    let order = walk(&t, &r);
    for &i in &order[..4] {
        make_resident(&t, i, &r);
        set_load(&t, i, 1);
    }
    set_load(&t, order[2], 0);
    // Four resident owners: normal urgency would sample two; High scans.
    assert_eq!(
        pick_now(&t, &ask(&r, 4)),
        Some((order[2], Branch::ResidentOwner))
    );
}

#[tokio::test(start_paused = true)]
async fn critical_stays_warm_past_the_cap_and_never_spills_cold_while_warm_admits() {
    let t = table(6);
    let critical = route("llama").with_urgency(Urgency::Critical);
    let normal = route("llama");
    let order = walk(&t, &normal);
    make_resident(&t, order[1], &normal);
    set_load(&t, order[1], 5);
    // Cap = ceil(1.25 × 6 / 6) = 2: the resident owner is over it.
    assert_eq!(
        pick_now(&t, &ask(&normal, 2)),
        Some((order[0], Branch::ColdOwner))
    );
    let t = table(6);
    make_resident(&t, order[1], &normal);
    set_load(&t, order[1], 5);
    assert_eq!(
        pick_now(&t, &ask(&critical, 2)),
        Some((order[1], Branch::ResidentOwner)),
        "critical waits on the warm owner rather than load cold"
    );
    // Owners out; warm only far along the ring: critical goes there, not
    // to the first (cold) backend past the owners.
    let t = table(6);
    trip(&t, order[0]);
    trip(&t, order[1]);
    make_resident(&t, order[4], &normal);
    set_load(&t, order[4], 5);
    assert_eq!(
        pick_now(&t, &ask(&critical, 2)),
        Some((order[4], Branch::Spill))
    );
    assert_eq!(
        pick_now(&t, &ask(&normal, 2)).map(|p| p.1),
        Some(Branch::Spill)
    );
}

#[tokio::test(start_paused = true)]
async fn empty_table_has_no_pick() {
    let t = table(0);
    let r = route("m");
    assert!(pick_now(&t, &ask(&r, 2)).is_none());
    let update = route("m").with_kind(RequestKind::Update);
    assert!(pick_with(&t, &ask(&update, 0), &mut || 7).is_none());
}

#[tokio::test(start_paused = true)]
async fn an_owner_still_loading_a_model_is_not_given_a_second_load() {
    let t = table(6);
    let r = route("llama");
    let order = walk(&t, &r);
    start_loading(&t, order[0], &route("other-model"));
    assert_eq!(
        pick_now(&t, &ask(&r, 2)),
        Some((order[1], Branch::ColdOwner)),
        "the primary is busy loading: the second owner loads it"
    );
    // Once the other model is served there, the primary loads again.
    let t = table(6);
    start_loading(&t, order[0], &route("other-model"));
    t.backends[order[0]]
        .residency
        .confirm(route("other-model").model.hash64());
    assert_eq!(
        pick_now(&t, &ask(&r, 2)),
        Some((order[0], Branch::ColdOwner))
    );
    // ... and a load that never got its response stops counting after the
    // loading grace.
    let t = table(6);
    start_loading(&t, order[0], &route("other-model"));
    tokio::time::advance(Duration::from_millis(LOADING_GRACE_MS)).await;
    assert_eq!(
        pick_now(&t, &ask(&r, 2)),
        Some((order[0], Branch::ColdOwner))
    );
}

#[tokio::test(start_paused = true)]
async fn a_served_owner_is_preferred_to_one_where_the_model_is_still_loading() {
    let t = table(6);
    let r = route("llama");
    let order = walk(&t, &r);
    start_loading(&t, order[0], &r);
    make_resident(&t, order[1], &r);
    assert_eq!(
        pick_now(&t, &ask(&r, 2)),
        Some((order[1], Branch::ResidentOwner)),
        "a request on the primary would wait for its load"
    );
    // With the served owner at the cap, the loading one is next.
    set_load(&t, order[1], 10);
    assert_eq!(
        pick_now(&t, &ask(&r, 2)),
        Some((order[0], Branch::ResidentOwner))
    );
}

#[tokio::test(start_paused = true)]
async fn a_pick_asks_for_confirmation_until_the_model_is_served() {
    let t = table(6);
    let r = route("llama");
    let key = r.model.hash64();
    let mut no_random = || unreachable!("this pick does not sample");
    let first = pick_with(&t, &ask(&r, 1), &mut no_random).unwrap();
    assert_eq!(first.warmth, Warmth::Cold, "a cold load");
    let second = pick_with(&t, &ask(&r, 1), &mut no_random).unwrap();
    assert_eq!(
        second.warmth,
        Warmth::Cold,
        "still loading: no response yet"
    );
    t.backends[first.index].residency.confirm(key);
    let third = pick_with(&t, &ask(&r, 1), &mut no_random).unwrap();
    assert_eq!(third.warmth, Warmth::Warm, "served");
}

#[tokio::test(start_paused = true)]
async fn half_open_breakers_with_every_probe_out_count_as_ineligible_for_panic_mode() {
    let t = table(4);
    let r = route("resnet");
    let order = walk(&t, &r);
    for &i in &order {
        trip(&t, i);
    }
    tokio::time::advance(Duration::from_secs(5)).await;
    // Three of the four go half-open and send out all their probes.
    let mut probes = Vec::new();
    for &i in &order[1..] {
        let breaker = &t.backends[i].breaker;
        while let Ok(permit) = breaker.try_acquire() {
            probes.push(permit);
        }
        assert!(!breaker.admits(), "no probe left");
    }
    // The fourth, half-open with its probes available, is all that admits:
    // 1 of 4, under 50%.
    assert_eq!(pick_now(&t, &ask(&r, 1)), Some((order[0], Branch::Panic)));
    // A probe coming back makes its backend eligible again.
    probes.pop();
    assert!(t.backends[order[3]].breaker.admits());
}

#[tokio::test(start_paused = true)]
async fn many_owners_are_listed_in_the_scratch_and_reused_without_stale_entries() {
    let t = table(300);
    let r = route("llama");
    let order = walk(&t, &r);
    // Resident only on the 91st owner: past the lists kept on the stack.
    make_resident(&t, order[90], &r);
    let mut scratch = Scratch::default();
    let mut no_random = || unreachable!("one resident owner: no sampling");
    let mut pick_k = |k: usize, scratch: &mut Scratch| {
        let p = pick(
            &t,
            &ask(&r, k),
            &RULES,
            &Now::lazy(),
            &mut no_random,
            scratch,
        )
        .unwrap();
        (p.index, p.branch)
    };
    assert_eq!(
        pick_k(100, &mut scratch),
        (order[90], Branch::ResidentOwner)
    );
    assert_eq!(scratch.heap.len(), 300, "three lists of 100");
    // Fewer owners, the same scratch: the 91st backend is no owner now,
    // and what the first pick listed is not read.
    assert_eq!(pick_k(20, &mut scratch), (order[0], Branch::ColdOwner));
    assert_eq!(scratch.heap.len(), 300, "not shrunk");
    assert_eq!(
        pick_k(MAX_OWNERS, &mut scratch),
        (order[90], Branch::ResidentOwner)
    );
}

#[tokio::test(start_paused = true)]
async fn a_breaker_whose_open_duration_is_up_takes_the_next_request_as_its_probe() {
    let t = table(6);
    let r = route("llama");
    let order = walk(&t, &r);
    make_resident(&t, order[0], &r);
    make_resident(&t, order[1], &r);
    // Order[0] tripped, its latency estimate full of failure penalties.
    trip(&t, order[0]);
    for _ in 0..10 {
        t.backends[order[0]]
            .latency
            .record(Duration::from_millis(1), Outcome::Failure);
    }
    assert!(t.backends[order[0]].cost() > 10.0 * t.backends[order[1]].cost());
    assert_eq!(pick_now(&t, &ask(&r, 2)).map(|p| p.0), Some(order[1]));
    // Its open duration up: the next requests are its half-open probes,
    // however costly it looks, as many as the breaker has permits.
    let breaker = &t.backends[order[0]].breaker;
    tokio::time::advance(breaker.config().open_duration()).await;
    let permits = breaker.config().half_open_permits();
    for probe in 0..permits {
        let picked = pick_with(&t, &ask(&r, 2), &mut || 0).unwrap();
        assert_eq!(picked.index, order[0], "probe {probe}");
        // Held, as a request in flight would be.
        std::mem::forget(picked);
    }
    assert_eq!(breaker.state(), crate::breaker::BreakerState::HalfOpen);
    assert_eq!(
        pick_now(&t, &ask(&r, 2)).map(|p| p.0),
        Some(order[1]),
        "its permits out, the rest go to the other owner"
    );
}
