use proptest::prelude::*;

use super::*;
use crate::backend::BackendId;
use crate::ring::RingConfig;

fn ring(n: usize) -> Ring {
    let ids = (0..n).map(|i| (BackendId::new(&format!("10.0.0.{i}:8000")).unwrap(), 1));
    Ring::build(&RingConfig::default(), ids).unwrap()
}

/// `m` models of Zipf(1.1) demand, each with `ceil(n × share)` owners (at
/// most 8), none placed before.
fn zipf(m: usize, n: usize) -> Vec<Demanded> {
    let weights: Vec<f64> = (1..=m).map(|r| 1.0 / (r as f64).powf(1.1)).collect();
    let total: f64 = weights.iter().sum();
    weights
        .iter()
        .enumerate()
        .map(|(r, w)| Demanded {
            key: xxhash_rust::xxh3::xxh3_64(format!("model-{r:02}").as_bytes()),
            owners: ((n as f64 * w / total).ceil() as usize).min(MAX_ASSIGNED),
            previous: Assigned::default(),
        })
        .collect()
}

/// The models each member owns under `plan`.
fn held(n: usize, plan: &[(u64, Assigned)]) -> Vec<usize> {
    let mut held = vec![0; n];
    for (_, assigned) in plan {
        assigned.owners().for_each(|i| held[i] += 1);
    }
    held
}

fn nowhere(_: usize, _: u64) -> bool {
    false
}

#[test]
fn no_member_owns_more_models_than_it_holds() {
    let (n, slots) = (8, 5);
    let models = zipf(32, n);
    let copies: usize = models.iter().map(|m| m.owners).sum();
    assert!(copies <= n * slots, "{copies} copies fit in 40 slots");
    let plan = plan(&ring(n), &[slots; 8], &models, nowhere);
    assert_eq!(plan.len(), 32, "every model placed");
    let by_plan = held(n, &plan);
    assert!(
        by_plan.iter().all(|&h| h <= slots),
        "models held: {by_plan:?}"
    );
    // The ring's first owners alone, for the same models, go past it: the
    // backend that owns 7 evicts for ever.
    let r = ring(n);
    let ring_only: Vec<(u64, Assigned)> = models
        .iter()
        .map(|m| {
            let mut a = Assigned::default();
            r.walk(m.key).take(m.owners).for_each(|i| a.push(i));
            (m.key, a)
        })
        .collect();
    let by_ring = held(n, &ring_only);
    assert!(by_ring.iter().any(|&h| h > slots), "{by_ring:?}");
}

#[test]
fn the_plan_moves_nothing_while_nothing_changes() {
    let n = 8;
    let mut models = zipf(32, n);
    let first = plan(&ring(n), &[5; 8], &models, nowhere);
    for m in &mut models {
        m.previous = first.iter().find(|(k, _)| *k == m.key).unwrap().1;
    }
    assert_eq!(plan(&ring(n), &[5; 8], &models, nowhere), first);
    // A previous owner comes first even where the ring would not put it.
    let (key, _) = first[0];
    let m = models.iter_mut().find(|m| m.key == key).unwrap();
    let far = ring(n).walk(key).last().unwrap();
    m.previous = Assigned::default();
    m.previous.push(far);
    let moved = plan(&ring(n), &[5; 8], &models, nowhere);
    let (_, assigned) = moved.iter().find(|(k, _)| *k == key).unwrap();
    assert_eq!(assigned.owners().next(), Some(far));
}

#[test]
fn a_model_goes_where_it_is_resident_before_its_ring_owner() {
    let n = 8;
    let mut models = zipf(1, n);
    models[0].owners = 1;
    let key = models[0].key;
    let second = ring(n).walk(key).nth(1).unwrap();
    let plan = plan(&ring(n), &[5; 8], &models, |i, k| i == second && k == key);
    assert_eq!(plan[0].1.owners().collect::<Vec<_>>(), [second]);
}

#[test]
fn with_no_slot_left_a_model_still_gets_its_owners() {
    // 3 members of 1 slot, 4 models of one owner each: one model over.
    let models: Vec<Demanded> = (1..=4)
        .map(|key| Demanded {
            key,
            owners: 1,
            previous: Assigned::default(),
        })
        .collect();
    let plan = plan(&ring(3), &[1; 3], &models, nowhere);
    assert_eq!(plan.len(), 4);
    assert_eq!(held(3, &plan).iter().sum::<usize>(), 4);
}

#[test]
fn no_members_or_no_demand_plans_nothing() {
    assert!(plan(&ring(0), &[], &zipf(4, 1), nowhere).is_empty());
    assert!(plan(&ring(4), &[4; 4], &[], nowhere).is_empty());
}

proptest! {
    /// Whatever the demand: each model placed once, on as many distinct
    /// members as it has owners (at most the members), every one a
    /// member; and with one owner each and room for all, no member over
    /// its slots.
    #[test]
    fn each_model_gets_its_owners_within_the_slots(
        n in 1usize..12,
        demand in proptest::collection::vec((any::<u64>(), 1usize..8), 1..40),
        slots in 1usize..8,
    ) {
        let models: Vec<Demanded> = demand
            .iter()
            .map(|&(key, owners)| Demanded { key, owners, previous: Assigned::default() })
            .collect();
        let plan = plan(&ring(n), &vec![slots; n], &models, nowhere);
        let mut keys: Vec<u64> = models.iter().map(|m| m.key).collect();
        keys.sort_unstable();
        keys.dedup();
        prop_assert_eq!(plan.len(), keys.len());
        let mut copies = 0;
        for (key, assigned) in &plan {
            let m = models.iter().find(|m| m.key == *key).unwrap();
            let owners: Vec<usize> = assigned.owners().collect();
            prop_assert_eq!(owners.len(), m.owners.min(n));
            let mut distinct = owners.clone();
            distinct.sort_unstable();
            distinct.dedup();
            prop_assert_eq!(distinct.len(), owners.len());
            prop_assert!(owners.iter().all(|&i| i < n));
            copies += owners.len();
        }
        // One owner each, and room for all: each finds a slot along its
        // walk, which covers every member (a model of k owners may find
        // fewer than k members with a slot left while others have two).
        if models.iter().all(|m| m.owners == 1) && copies <= n * slots {
            prop_assert!(held(n, &plan).iter().all(|&h| h <= slots));
        }
    }
}
