use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use tokio::time::Instant;

use super::*;
use crate::backend::BackendId;
use crate::balance::table::{BackendState, Fleet};
use crate::breaker::Policy;
use crate::classify::Outcome;
use crate::ring::{Ring, RingConfig};
use crate::route::{ModelId, RouteInfo};

fn table(n: usize) -> Table {
    let ids: Vec<BackendId> = (0..n)
        .map(|i| BackendId::new(&format!("b{i}")).unwrap())
        .collect();
    let policy = Policy::builder()
        .window(2)
        .minimum_calls(1)
        .build()
        .unwrap();
    let fleet = Arc::new(Fleet::new());
    Table {
        ring: Ring::build(
            &RingConfig::default(),
            ids.iter().cloned().map(|id| (id, 1)),
        )
        .unwrap(),
        backends: ids
            .into_iter()
            .map(|id| {
                Arc::new(BackendState::new(
                    id,
                    policy.clone(),
                    fleet.clone(),
                    4,
                    false,
                    30.0,
                ))
            })
            .collect(),
        fleet,
        in_ring: n as f64,
    }
}

fn trip(table: &Table, index: usize) {
    let breaker = &table.backends[index].breaker;
    breaker.try_acquire().unwrap().record(Outcome::Failure);
    assert!(!breaker.admits(Instant::now()));
}

fn set_load(table: &Table, index: usize, load: usize) {
    let old = table.backends[index].traffic.set_in_flight(load);
    table.fleet.traffic.shift(load as u64, old as u64);
}

fn route(model: &str) -> RouteInfo {
    RouteInfo::new(ModelId::new(model).unwrap())
}

fn walk(table: &Table, route: &RouteInfo) -> Vec<usize> {
    table.ring.walk(route.model.hash64()).collect()
}

/// Makes `route`'s model resident and served on backend `index`.
fn make_resident(table: &Table, index: usize, route: &RouteInfo) {
    let residency = &table.backends[index].residency;
    residency.touch(route.model.hash64(), 0);
    residency.confirm(route.model.hash64());
}

/// Sends `route`'s model to backend `index` now, with no response yet:
/// resident, still loading.
fn start_loading(table: &Table, index: usize, route: &RouteInfo) {
    let now = table.fleet.millis(Instant::now());
    table.backends[index]
        .residency
        .touch(route.model.hash64(), now);
}

/// Fills backend `index`'s model slots with other models, served.
fn fill_slots(table: &Table, index: usize) {
    for m in 0..4 {
        let residency = &table.backends[index].residency;
        residency.touch(u64::MAX - m, 0);
        residency.confirm(u64::MAX - m);
    }
}

fn ask(route: &RouteInfo, owners: usize) -> Ask {
    Ask {
        kind: route.kind,
        urgency: route.urgency,
        key: route.model.hash64(),
        owners,
        sampled: true,
        unseen: false,
        exclude: None,
    }
}

const RULES: Rules = Rules {
    load_factor: 1.25,
    panic_threshold: 0.5,
    placement: false,
    prefer_warm: false,
};

/// Picks under [`RULES`], the clock read if needed, a fresh scratch.
fn pick_with(t: &Table, ask: &Ask, random: &mut impl FnMut() -> u64) -> Option<Pick> {
    pick(
        t,
        ask,
        &RULES,
        &Now::lazy(),
        random,
        &mut Scratch::default(),
    )
    .ok()
}

/// Picks with no randomness available (inference over at most two
/// resident owners never samples).
fn pick_now(t: &Table, ask: &Ask) -> Option<(usize, Branch)> {
    let mut no_random = || unreachable!("this pick does not sample");
    let p = pick_with(t, ask, &mut no_random)?;
    Some((p.index, p.branch))
}

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
    set_load(&t, order[0], 0);
    t.backends[order[1]]
        .latency
        .record(Duration::from_millis(500), false);
    assert_eq!(
        pick_now(&t, &ask(&r, 2)),
        Some((order[0], Branch::ResidentOwner)),
        "the other is slower"
    );
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
async fn update_falls_back_to_the_cheapest_eligible() {
    let t = table(4);
    let update = route("m").with_kind(RequestKind::Update);
    let mut zero = || 0;
    let [a, b] = sample2(4, &mut zero);
    trip(&t, a);
    trip(&t, b);
    let others: Vec<usize> = (0..4).filter(|i| *i != a && *i != b).collect();
    set_load(&t, others[0], 5);
    set_load(&t, others[1], 1);
    let p = pick_with(&t, &ask(&update, 0), &mut zero).unwrap();
    assert_eq!((p.index, p.branch), (others[1], Branch::Update));
}

/// An eligible backend sampled with an ineligible one gets a rival drawn
/// among the eligible, not the pick by default.
#[tokio::test(start_paused = true)]
async fn update_redraws_an_ineligible_sample() {
    let t = table(8);
    trip(&t, 0);
    trip(&t, 1);
    for i in 2..8 {
        set_load(&t, i, 1);
    }
    set_load(&t, 7, 40); // far costlier than every other eligible one
    let update = route("m").with_kind(RequestKind::Update);
    let mut state = 7u64;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        state >> 11
    };
    let mut costly = 0;
    for _ in 0..10_000 {
        let p = pick_with(&t, &ask(&update, 0), &mut next).unwrap();
        assert!(p.index >= 2, "an open breaker is not picked");
        costly += usize::from(p.index == 7);
        drop(p);
    }
    assert!(costly < 100, "{costly} of 10 000 went to the costliest");
}

proptest! {
    #[test]
    fn sample2_is_distinct_and_in_range(n in 2u64..1000, x: u64, y: u64) {
        let mut values = [x, y].into_iter();
        let [a, b] = sample2(n, &mut || values.next().unwrap());
        prop_assert_ne!(a, b);
        prop_assert!((a as u64) < n && (b as u64) < n);
    }

    /// P2C takes the cheaper of the two sampled backends, by DESIGN.md's
    /// cost: in-flight, latency and health together.
    #[test]
    fn update_takes_the_cheaper_of_the_sampled_pair(
        backends in proptest::collection::vec((0usize..50, 1u64..500, 0.0f64..=1.0), 2..12),
        x: u64,
        y: u64,
    ) {
        let t = table(backends.len());
        for (i, &(load, latency_ms, health)) in backends.iter().enumerate() {
            set_load(&t, i, load);
            t.backends[i].latency.record(Duration::from_millis(latency_ms), false);
            t.backends[i].health.weight.set(health);
        }
        let costs: Vec<f64> = t.backends.iter().map(|b| b.cost()).collect();
        let [a, b] = {
            let mut values = [x, y].into_iter();
            sample2(backends.len() as u64, &mut || values.next().unwrap())
        };
        let mut values = [x, y].into_iter();
        let update = route("m").with_kind(RequestKind::Update);
        let p = pick_with(&t, &ask(&update, 0), &mut || values.next().unwrap()).unwrap();
        prop_assert!(p.index == a || p.index == b);
        prop_assert_eq!(p.branch, Branch::Update);
        prop_assert_eq!(costs[p.index], costs[a].min(costs[b]));
    }
}

/// Over many samples, every pair is drawn about equally often.
#[test]
fn sample2_is_uniform_over_backends() {
    let mut state = 1u64;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        state >> 11
    };
    let mut hits = [0u32; 5];
    for _ in 0..50_000 {
        for i in sample2(5, &mut next) {
            hits[i] += 1;
        }
    }
    for h in hits {
        assert!((18_000..22_000).contains(&h), "{hits:?}");
    }
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
    assert!(first.confirms, "a cold load");
    let second = pick_with(&t, &ask(&r, 1), &mut no_random).unwrap();
    assert!(second.confirms, "still loading: no response yet");
    t.backends[first.index].residency.confirm(key);
    let third = pick_with(&t, &ask(&r, 1), &mut no_random).unwrap();
    assert!(!third.confirms, "served");
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
        assert!(!breaker.admits(Instant::now()), "no probe left");
    }
    // The fourth, half-open with its probes available, is all that admits:
    // 1 of 4, under 50%.
    assert_eq!(pick_now(&t, &ask(&r, 1)), Some((order[0], Branch::Panic)));
    // A probe coming back makes its backend eligible again.
    probes.pop();
    assert!(t.backends[order[3]].breaker.admits(Instant::now()));
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
            .record(Duration::from_millis(1), true);
    }
    assert!(t.backends[order[0]].cost() > 10.0 * t.backends[order[1]].cost());
    assert_eq!(pick_now(&t, &ask(&r, 2)).map(|p| p.0), Some(order[1]));
    // Its open duration up: the next requests are its half-open probes,
    // however costly it looks, as many as the breaker has permits.
    let breaker = &t.backends[order[0]].breaker;
    tokio::time::advance(breaker.policy().open_duration()).await;
    let permits = breaker.policy().half_open_permits();
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

/// What `in_panic` decides, by a scan of every backend.
fn panic_by_scan(t: &Table, threshold: f64) -> bool {
    let now = Instant::now();
    let eligible = t.backends.iter().filter(|b| b.eligible(now)).count();
    threshold > 0.0
        && (t.fleet.not_closed.load(Relaxed) > 0 || t.fleet.ejected.load(Relaxed) > 0)
        && (eligible as f64) < threshold * t.backends.len() as f64
}

#[tokio::test(start_paused = true)]
async fn panic_mode_skips_the_scan_only_when_too_few_are_out_and_counts_removed_backends() {
    let t = table(8);
    let decide = |t: &Table| in_panic(t, 0.5, &Now::lazy());
    trip(&t, 0);
    assert!(!decide(&t) && !panic_by_scan(&t, 0.5), "7 of 8 eligible");
    // Removed backends are out too: 3 of 8 eligible once four are removed.
    for i in 4..8 {
        t.backends[i].mark_removed();
        t.backends[i].mark_removed();
    }
    assert_eq!(t.fleet.removed.load(Relaxed), 4);
    assert!(decide(&t) && panic_by_scan(&t, 0.5));
    // Removed but idle otherwise: no breaker out, no scan, no panic (as
    // before the bound).
    let u = table(4);
    u.backends[0].mark_removed();
    u.backends[1].mark_removed();
    u.backends[2].mark_removed();
    assert!(!decide(&u));
    // A dropped state no longer counts.
    let Table {
        backends, fleet, ..
    } = u;
    drop(backends);
    assert_eq!(fleet.removed.load(Relaxed), 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn panic_mode_matches_a_scan_of_every_backend(
        states in prop::collection::vec(0u8..3, 1..24),
        threshold in prop_oneof![Just(0.0), 0.05f64..1.0],
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(async {
            let t = table(states.len());
            for (i, &s) in states.iter().enumerate() {
                match s {
                    1 => trip(&t, i),
                    2 => t.backends[i].mark_removed(),
                    _ => {}
                }
            }
            prop_assert_eq!(
                in_panic(&t, threshold, &Now::lazy()),
                panic_by_scan(&t, threshold)
            );
            Ok(())
        })?;
    }
}

#[tokio::test(start_paused = true)]
async fn the_load_cap_divides_by_the_backends_the_ring_stands_for() {
    let mut t = table(6);
    let r = route("llama");
    let order = walk(&t, &r);
    for &i in &order {
        set_load(&t, i, 2);
    }
    // 12 in flight: ceil(1.25 × 13 / 6) = 3.
    assert_eq!(load_cap(&t, 1.25), 3);
    // Two of the six still joining, at a fifth of their points each: the
    // traffic is over 4.4 backends' worth of ring, ceil(1.25 × 13 / 4.4) = 4.
    t.in_ring = 4.4;
    assert_eq!(load_cap(&t, 1.25), 4);
}

/// A hedge's backup (non-strict exclusion) is refused when no other
/// eligible backend has the model resident; a retry (strict) goes to
/// another backend all the same; with another resident backend, the
/// backup goes there.
#[tokio::test(start_paused = true)]
async fn a_backup_with_no_other_resident_backend_is_refused() {
    let t = table(4);
    let r = route("llama");
    let order = walk(&t, &r);
    make_resident(&t, order[0], &r);
    let excluding = |strict| Ask {
        exclude: Some((order[0], strict)),
        ..ask(&r, 2)
    };
    let mut no_random = || 0;
    let backup = pick_with(&t, &excluding(false), &mut no_random);
    assert!(backup.is_none());
    let refused = pick(
        &t,
        &excluding(false),
        &RULES,
        &Now::lazy(),
        &mut no_random,
        &mut Scratch::default(),
    );
    assert!(matches!(refused, Err(Miss::NoAlternative)));
    assert_eq!(t.backends[order[0]].load(), 0, "nothing picked");
    let retry = pick_with(&t, &excluding(true), &mut no_random).unwrap();
    assert_ne!(retry.index, order[0]);
    drop(retry);
    make_resident(&t, order[1], &r);
    let backup = pick_with(&t, &excluding(false), &mut no_random).unwrap();
    assert_eq!(backup.index, order[1]);
}
