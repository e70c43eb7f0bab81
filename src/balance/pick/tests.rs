use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use proptest::prelude::*;
use tokio::time::Instant;

use super::*;
use crate::backend::BackendId;
use crate::balance::table::BackendState;
use crate::breaker::{Outcome, Policy};
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
    let fleet = Arc::new(AtomicUsize::new(0));
    Table {
        ring: Ring::build(
            &RingConfig::default(),
            ids.iter().cloned().map(|id| (id, 1)),
        )
        .unwrap(),
        backends: ids
            .into_iter()
            .map(|id| Arc::new(BackendState::new(id, policy.clone(), fleet.clone())))
            .collect(),
        fleet_in_flight: fleet,
    }
}

fn trip(table: &Table, index: usize) {
    let breaker = &table.backends[index].breaker;
    breaker.try_acquire().unwrap().record(Outcome::Failure);
    assert!(!breaker.admits(Instant::now()));
}

fn set_load(table: &Table, index: usize, load: usize) {
    let old = table.backends[index]
        .in_flight
        .swap(load, Ordering::Relaxed);
    table.fleet_in_flight.fetch_add(load, Ordering::Relaxed);
    table.fleet_in_flight.fetch_sub(old, Ordering::Relaxed);
}

fn route(model: &str) -> RouteInfo {
    RouteInfo::new(ModelId::new(model).unwrap())
}

fn walk(table: &Table, route: &RouteInfo) -> Vec<usize> {
    table.ring.walk(route.model.hash64()).collect()
}

fn no_random() -> impl FnMut() -> u64 {
    || unreachable!("inference does not sample")
}

#[tokio::test(start_paused = true)]
async fn inference_stays_on_primary_while_under_the_load_cap() {
    let t = table(6);
    let r = route("llama");
    let order = walk(&t, &r);
    let now = Instant::now();
    let p = pick(&t, r.kind, r.model.hash64(), 2, 1.25, now, &mut no_random()).unwrap();
    assert_eq!((p.index, p.branch), (order[0], Branch::Owner));
    // 15 in flight over 6 backends: cap = ceil(1.25 × 16 / 6) = 4.
    for &i in &order[2..] {
        set_load(&t, i, 3);
    }
    set_load(&t, order[0], 3);
    assert_eq!(load_cap(&t, 1.25), 4);
    assert_eq!(
        pick(&t, r.kind, r.model.hash64(), 2, 1.25, now, &mut no_random())
            .unwrap()
            .index,
        order[0]
    );
    set_load(&t, order[0], 4);
    assert_eq!(
        pick(&t, r.kind, r.model.hash64(), 2, 1.25, now, &mut no_random())
            .unwrap()
            .index,
        order[1],
        "the primary at the cap is passed over"
    );
}

#[tokio::test(start_paused = true)]
async fn inference_takes_least_loaded_owner_when_all_are_at_the_cap() {
    let t = table(6);
    let r = route("llama");
    let order = walk(&t, &r);
    let now = Instant::now();
    set_load(&t, order[0], 3);
    set_load(&t, order[1], 2);
    assert_eq!(
        pick(&t, r.kind, r.model.hash64(), 2, 1.25, now, &mut no_random())
            .unwrap()
            .index,
        order[1]
    );
    set_load(&t, order[2], 0);
    assert_eq!(
        pick(&t, r.kind, r.model.hash64(), 2, 1.25, now, &mut no_random())
            .unwrap()
            .index,
        order[1],
        "never beyond k owners while one admits"
    );
}

#[tokio::test(start_paused = true)]
async fn inference_skips_open_breakers_then_spills_along_the_ring() {
    let t = table(5);
    let r = route("resnet");
    let order = walk(&t, &r);
    let now = Instant::now();
    trip(&t, order[0]);
    let p = pick(&t, r.kind, r.model.hash64(), 2, 1.25, now, &mut no_random()).unwrap();
    assert_eq!((p.index, p.branch), (order[1], Branch::Owner));
    trip(&t, order[1]);
    let p = pick(&t, r.kind, r.model.hash64(), 2, 1.25, now, &mut no_random()).unwrap();
    assert_eq!((p.index, p.branch), (order[2], Branch::Spill));
    for &i in &order[2..] {
        trip(&t, i);
    }
    assert!(pick(&t, r.kind, r.model.hash64(), 2, 1.25, now, &mut no_random()).is_none());
}

#[tokio::test(start_paused = true)]
async fn empty_table_has_no_pick() {
    let t = table(0);
    let now = Instant::now();
    assert!(pick(
        &t,
        RequestKind::Inference,
        0,
        2,
        1.25,
        now,
        &mut no_random()
    )
    .is_none());
    let update = route("m").with_kind(RequestKind::Update);
    assert!(pick(
        &t,
        update.kind,
        update.model.hash64(),
        2,
        1.25,
        now,
        &mut || 7
    )
    .is_none());
}

#[tokio::test(start_paused = true)]
async fn update_falls_back_to_least_loaded_eligible() {
    let t = table(4);
    let update = route("m").with_kind(RequestKind::Update);
    let now = Instant::now();
    let mut zero = || 0;
    let [a, b] = sample2(4, &mut zero);
    trip(&t, a);
    trip(&t, b);
    let others: Vec<usize> = (0..4).filter(|i| *i != a && *i != b).collect();
    set_load(&t, others[0], 5);
    set_load(&t, others[1], 1);
    let p = pick(
        &t,
        update.kind,
        update.model.hash64(),
        2,
        1.25,
        now,
        &mut zero,
    )
    .unwrap();
    assert_eq!((p.index, p.branch), (others[1], Branch::Update));
}

proptest! {
    #[test]
    fn sample2_is_distinct_and_in_range(n in 2u64..1000, x: u64, y: u64) {
        let mut values = [x, y].into_iter();
        let [a, b] = sample2(n, &mut || values.next().unwrap());
        prop_assert_ne!(a, b);
        prop_assert!((a as u64) < n && (b as u64) < n);
    }

    /// P2C takes the less loaded of the two sampled backends.
    #[test]
    fn update_takes_less_loaded_of_the_sampled_pair(
        loads in proptest::collection::vec(0usize..50, 2..12),
        x: u64,
        y: u64,
    ) {
        let t = table(loads.len());
        for (i, &load) in loads.iter().enumerate() {
            set_load(&t, i, load);
        }
        let [a, b] = {
            let mut values = [x, y].into_iter();
            sample2(loads.len() as u64, &mut || values.next().unwrap())
        };
        let mut values = [x, y].into_iter();
        let update = route("m").with_kind(RequestKind::Update);
        let p = pick(&t, update.kind, update.model.hash64(), 2, 1.25, Instant::now(), &mut || values.next().unwrap()).unwrap();
        prop_assert!(p.index == a || p.index == b);
        prop_assert_eq!(loads[p.index], loads[a].min(loads[b]));
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
