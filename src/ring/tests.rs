use proptest::prelude::*;

use super::*;
use crate::route::ModelId;

fn ids(n: usize) -> Vec<BackendId> {
    (0..n)
        .map(|i| BackendId::new(&format!("backend-{i}")).unwrap())
        .collect()
}

fn ring_of(config: &RingConfig, ids: &[BackendId]) -> Ring {
    Ring::build(config, ids.iter().cloned().map(|id| (id, 1))).unwrap()
}

fn primary(ring: &Ring, key: u64) -> &BackendId {
    ring.member(ring.walk(key).next().unwrap())
}

/// The model → owners mapping is a semver-visible contract: these vectors
/// must not change without a breaking release.
#[test]
fn golden_owners() {
    let ring = ring_of(&RingConfig::default(), &ids(8));
    let golden: &[(&str, [&str; 3])] = GOLDEN;
    for (model, want) in golden {
        let key = ModelId::new(model).unwrap().hash64();
        let got: Vec<&str> = ring
            .owners(key, 3)
            .map(|i| ring.member(i).as_str())
            .collect();
        assert_eq!(got, want, "owners of {model}");
    }
}

// Eight members `backend-0..8`, weight 1, seed 0, 150 vnodes.
const GOLDEN: &[(&str, [&str; 3])] = &[
    ("model-0", ["backend-6", "backend-7", "backend-0"]),
    ("model-1", ["backend-2", "backend-6", "backend-5"]),
    ("model-2", ["backend-3", "backend-4", "backend-2"]),
    ("model-3", ["backend-6", "backend-0", "backend-5"]),
    ("model-4", ["backend-4", "backend-6", "backend-7"]),
    ("model-5", ["backend-4", "backend-3", "backend-6"]),
    ("model-6", ["backend-4", "backend-2", "backend-7"]),
    ("model-7", ["backend-7", "backend-2", "backend-5"]),
    ("model-8", ["backend-7", "backend-0", "backend-5"]),
    ("model-9", ["backend-3", "backend-0", "backend-7"]),
    ("model-10", ["backend-5", "backend-7", "backend-2"]),
    ("model-11", ["backend-1", "backend-3", "backend-7"]),
    (
        "llama-3.1-8b-instruct",
        ["backend-2", "backend-7", "backend-3"],
    ),
    ("resnet-50", ["backend-1", "backend-0", "backend-5"]),
    ("bge-small-en", ["backend-1", "backend-3", "backend-0"]),
];

#[test]
fn rejects_bad_members() {
    let c = RingConfig::default();
    let dup = vec![(ids(1)[0].clone(), 1), (ids(1)[0].clone(), 2)];
    assert_eq!(Ring::build(&c, dup).unwrap_err().field, "backend_id");
    assert_eq!(
        Ring::build(&c, vec![(ids(1)[0].clone(), 0)])
            .unwrap_err()
            .field,
        "weight"
    );
    let huge = vec![(ids(1)[0].clone(), u32::MAX)];
    assert_eq!(
        Ring::build(&c, huge).unwrap_err().field,
        "vnodes_per_weight"
    );
    assert_eq!(
        RingConfig::new(0, 0).unwrap_err().field,
        "vnodes_per_weight"
    );
}

#[test]
fn empty_ring_walks_nothing() {
    let ring = Ring::build(&RingConfig::default(), Vec::new()).unwrap();
    assert!(ring.is_empty());
    assert_eq!(ring.walk(42).next(), None);
}

#[test]
fn colliding_points_are_all_kept_in_id_order() {
    let a = BackendId::new("a").unwrap();
    let b = BackendId::new("b").unwrap();
    for members in [
        vec![(a.clone(), 1), (b.clone(), 1)],
        vec![(b.clone(), 1), (a.clone(), 1)],
    ] {
        let mut points: Vec<Point> = (0..2)
            .map(|m| Point {
                hash: 100,
                member: m,
            })
            .collect();
        sort_points(&members, &mut points);
        let ring = Ring {
            points: points.into(),
            members: members.into_iter().map(|(id, _)| id).collect(),
        };
        let order: Vec<&str> = ring.walk(100).map(|i| ring.member(i).as_str()).collect();
        assert_eq!(order, ["a", "b"]);
        let order: Vec<&str> = ring.walk(101).map(|i| ring.member(i).as_str()).collect();
        assert_eq!(order, ["a", "b"], "wraps around to the collided pair");
    }
}

#[test]
fn weights_scale_points_and_share() {
    let c = RingConfig::default();
    let members = ids(2);
    let ring = Ring::build(&c, vec![(members[0].clone(), 3), (members[1].clone(), 1)]).unwrap();
    assert_eq!(ring.points(), 600);
    let heavy = keys(9, 20_000)
        .filter(|&key| primary(&ring, key) == &members[0])
        .count();
    let share = heavy as f64 / 20_000.0;
    assert!((0.68..0.82).contains(&share), "share {share}");
}

#[test]
fn large_rings_walk_every_member_once() {
    let ring = ring_of(&RingConfig::new(1, 4).unwrap(), &ids(300));
    let mut all: Vec<usize> = ring.walk(12345).collect();
    all.sort_unstable();
    assert_eq!(all, (0..300).collect::<Vec<_>>());
}

fn keys(seed: u64, n: usize) -> impl Iterator<Item = u64> {
    (0..n as u64).map(move |i| xxhash_rust::xxh3::xxh3_64_with_seed(&i.to_le_bytes(), seed))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn every_key_maps_to_distinct_members(n in 1usize..24, k in 1usize..6, seed: u64, key: u64) {
        let ring = ring_of(&RingConfig::new(seed, 20).unwrap(), &ids(n));
        let owners: Vec<usize> = ring.owners(key, k).collect();
        prop_assert_eq!(owners.len(), k.min(n));
        let mut sorted = owners.clone();
        sorted.sort_unstable();
        sorted.dedup();
        prop_assert_eq!(sorted.len(), owners.len());
        prop_assert!(owners.iter().all(|&i| i < n));
        prop_assert_eq!(ring.walk(key).count(), n);
    }

    #[test]
    fn adding_one_moves_about_its_share_all_to_it(n in 2usize..16, seed: u64) {
        let c = RingConfig::new(seed, DEFAULT_VNODES_PER_WEIGHT).unwrap();
        let before_ids = ids(n);
        let after_ids = ids(n + 1);
        let (before, after) = (ring_of(&c, &before_ids), ring_of(&c, &after_ids));
        let new = &after_ids[n];
        let mut moved = 0;
        for key in keys(seed, 4000) {
            let (b, a) = (primary(&before, key), primary(&after, key));
            if a != b {
                prop_assert_eq!(a, new);
                moved += 1;
            }
        }
        let share = moved as f64 / 4000.0;
        let expected = 1.0 / (n as f64 + 1.0);
        prop_assert!(share > expected * 0.5 && share < expected * 1.6, "moved {} expected {}", share, expected);
    }

    #[test]
    fn removing_one_moves_only_its_keys(n in 2usize..16, removed in 0usize..16, seed: u64) {
        let removed = removed % n;
        let c = RingConfig::new(seed, 50).unwrap();
        let all = ids(n);
        let rest: Vec<BackendId> = all.iter().enumerate().filter(|(i, _)| *i != removed).map(|(_, id)| id.clone()).collect();
        let (before, after) = (ring_of(&c, &all), ring_of(&c, &rest));
        for key in keys(seed, 2000) {
            let b = primary(&before, key);
            if b != &all[removed] {
                prop_assert_eq!(primary(&after, key), b);
            }
        }
    }

    #[test]
    fn same_inputs_same_mapping_in_any_order(n in 1usize..16, seed: u64, rotate in 0usize..16) {
        let c = RingConfig::new(seed, 30).unwrap();
        let members = ids(n);
        let mut shuffled = members.clone();
        shuffled.rotate_left(rotate % n);
        shuffled.reverse();
        let (a, b) = (ring_of(&c, &members), ring_of(&c, &shuffled));
        for key in keys(seed, 500) {
            let oa: Vec<&BackendId> = a.owners(key, 3).map(|i| a.member(i)).collect();
            let ob: Vec<&BackendId> = b.owners(key, 3).map(|i| b.member(i)).collect();
            prop_assert_eq!(oa, ob);
        }
    }
}
