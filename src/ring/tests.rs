use proptest::prelude::*;

use super::build::{sort_points, within_max_points, DEFAULT_VNODES_PER_WEIGHT};
use super::point::Point;
use super::*;
use crate::backend::id::BackendId;
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
    assert!(RingConfig::new(0, RingConfig::MAX_VNODES_PER_WEIGHT).is_ok());
    assert_eq!(
        RingConfig::new(0, RingConfig::MAX_VNODES_PER_WEIGHT + 1)
            .unwrap_err()
            .field,
        "vnodes_per_weight",
        "a value that leaves room for few backends"
    );
}

#[test]
fn config_reads_back_its_values() {
    let c = RingConfig::new(42, 7).unwrap();
    assert_eq!((c.seed(), c.vnodes_per_weight()), (42, 7));
    let d = RingConfig::default();
    assert_eq!(
        (d.seed(), d.vnodes_per_weight()),
        (0, DEFAULT_VNODES_PER_WEIGHT)
    );
}

/// A ring of exactly `MAX_POINTS` points is allowed, one more is not
/// (`rejects_bad_members` and `points::rejects_duplicates_and_too_many_points`
/// check that both builders apply the bound).
#[test]
fn the_point_bound_is_inclusive() {
    assert!(within_max_points(0));
    assert!(within_max_points(MAX_POINTS));
    assert!(!within_max_points(MAX_POINTS + 1));
}

#[test]
fn a_ring_reports_its_members_and_points() {
    let members = ids(3);
    let weighted = members.iter().cloned().map(|id| (id, 2));
    let ring = Ring::build(&RingConfig::new(0, 5).unwrap(), weighted).unwrap();
    assert!(!ring.is_empty());
    assert_eq!((ring.len(), ring.points()), (3, 30));
    assert_eq!(ring.members(), &members[..]);
    assert_eq!(ring.member(2), &members[2]);
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
        let ids = members.into_iter().map(|(id, _)| id).collect();
        let ring = Ring::from_sorted(points.into(), ids);
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

/// The walk as a plain scan of the points from the binary-searched start:
/// what `Ring::walk` yielded before the bucket index and the inline set.
fn reference_walk(ring: &Ring, key: u64) -> Vec<usize> {
    let start = ring.points.partition_point(|p| p.hash < key);
    let n = ring.points.len();
    let mut seen = vec![false; ring.len()];
    let mut order = Vec::new();
    for step in 0..n {
        let member = ring.point_member((start + step) % n);
        if !std::mem::replace(&mut seen[member], true) {
            order.push(member);
        }
    }
    order
}

/// Keys at, just around and between the ring's points, and the extremes.
fn probe_keys(ring: &Ring) -> impl Iterator<Item = u64> + '_ {
    let around = ring
        .points
        .iter()
        .flat_map(|p| [p.hash, p.hash.wrapping_sub(1), p.hash.wrapping_add(1)]);
    around.chain([0, 1, u64::MAX - 1, u64::MAX, 1 << 63])
}

/// A ring over the given point hashes, spread over `members` members, with
/// the points in ring order (as `Ring::build` sorts them).
fn ring_of_points(hashes: &[u64], members: usize) -> Ring {
    let members: Vec<(BackendId, u32)> = ids(members).into_iter().map(|id| (id, 1)).collect();
    let mut points: Vec<Point> = hashes
        .iter()
        .enumerate()
        .map(|(i, &hash)| Point {
            hash,
            member: (i % members.len()) as u32,
        })
        .collect();
    sort_points(&members, &mut points);
    Ring::from_sorted(
        points.into(),
        members.into_iter().map(|(id, _)| id).collect(),
    )
}

fn assert_start_matches(ring: &Ring, key: u64) {
    let want = ring.points.partition_point(|p| p.hash < key);
    assert_eq!(ring.start(key), want, "start of {key:#x}");
    assert_eq!(
        ring.primary(key),
        ring.walk(key).next(),
        "primary of {key:#x}"
    );
}

#[test]
fn start_of_tiny_rings_matches_binary_search() {
    let empty = Ring::build(&RingConfig::default(), Vec::new()).unwrap();
    let one = ring_of_points(&[7], 1);
    let top = ring_of_points(&[u64::MAX], 1);
    let bottom = ring_of_points(&[0, 0, 0], 2);
    for ring in [&empty, &one, &top, &bottom] {
        for key in probe_keys(ring) {
            assert_start_matches(ring, key);
        }
    }
    assert_eq!(one.start(8), 1, "past the last point: the walk wraps");
    assert_eq!(one.walk(8).next(), Some(0));
    assert_eq!(one.primary(8), Some(0));
    assert_eq!(empty.primary(8), None);
}

/// The index's own contract, not only the answers it gives (a broken index
/// that leaves every lookup to the binary search answers the same, slowly):
/// as many buckets as the next power of two of the points, each holding
/// its first point's position, and the owner exactly when no point falls
/// inside it; a key reads its own bucket.
#[test]
fn the_index_holds_each_buckets_first_point_and_owner() {
    for n in [0, 1, 5, 40] {
        let ring = ring_of(&RingConfig::new(9, 13).unwrap(), &ids(n));
        let index = &ring.index;
        let count = index.buckets.len();
        assert_eq!(count, ring.points().next_power_of_two().max(2));
        assert_eq!(index.shift, u64::BITS - count.trailing_zeros());
        let first_at = |j: usize| match j {
            j if j < count => ring
                .points
                .partition_point(|p| p.hash < (j as u64) << index.shift),
            _ => ring.points(),
        };
        let mut owned = 0;
        for (j, bucket) in index.buckets.iter().enumerate() {
            let (first, next) = (first_at(j), first_at(j + 1));
            assert_eq!(bucket.first as usize, first, "bucket {j} of {n} members");
            let successor = ring.points.get(first).or(ring.points.first());
            let owner = successor
                .filter(|_| first == next)
                .map(|p| p.member as usize);
            assert_eq!(bucket.owner(), owner, "bucket {j} of {n} members");
            owned += usize::from(owner.is_some());
            for key in [(j as u64) << index.shift, ((j as u64) << index.shift) | 1] {
                let read = index.bucket(key);
                assert_eq!((read.first, read.owner), (bucket.first, bucket.owner));
            }
        }
        assert_eq!(
            owned > 0,
            n > 0,
            "some buckets of {n} members hold no point"
        );
    }
}

#[test]
fn start_in_a_crowded_bucket_matches_binary_search() {
    // 64 points, 64 buckets: all in bucket 0, then all in the last one,
    // then 32 in one bucket of the middle with a point in every fourth
    // bucket after it (a search must stop at its bucket's end).
    let low: Vec<u64> = (0..64).map(|i| i * 3).collect();
    let high: Vec<u64> = low.iter().map(|h| u64::MAX - h).collect();
    let middle: Vec<u64> = (0..32)
        .map(|i| (20 << 58) + i * 5)
        .chain((0..32).map(|i| (21 + 4 * i % 43) << 58))
        .collect();
    for hashes in [low, high, middle] {
        let ring = ring_of_points(&hashes, 5);
        for key in probe_keys(&ring) {
            assert_start_matches(&ring, key);
        }
    }
}

#[test]
fn walks_on_large_rings_match_the_plain_scan() {
    for n in [257, 300, 1024] {
        let ring = ring_of(&RingConfig::new(3, 7).unwrap(), &ids(n));
        for key in keys(5, 64) {
            let want = reference_walk(&ring, key);
            assert_eq!(want.len(), n);
            let mut walk = ring.walk(key);
            let few: Vec<usize> = walk.by_ref().take(walk::FEW).collect();
            assert_eq!(few, want[..walk::FEW]);
            assert!(
                matches!(walk.seen, walk::Seen::Few { .. }),
                "no bit set on the heap for the first {} members",
                walk::FEW
            );
            let rest: Vec<usize> = walk.by_ref().collect();
            assert_eq!(rest, want[walk::FEW..]);
            assert!(matches!(walk.seen, walk::Seen::Heap(_)));
            let owners: Vec<usize> = ring.owners(key, 3).collect();
            assert_eq!(owners, want[..3]);
        }
    }
}

#[test]
fn walks_on_small_rings_match_the_plain_scan() {
    for n in [1, 8, 256] {
        let ring = ring_of(&RingConfig::new(3, 7).unwrap(), &ids(n));
        for key in keys(5, 64) {
            assert_eq!(
                ring.walk(key).collect::<Vec<_>>(),
                reference_walk(&ring, key)
            );
        }
    }
}

fn keys(seed: u64, n: usize) -> impl Iterator<Item = u64> {
    (0..n as u64).map(move |i| xxhash_rust::xxh3::xxh3_64_with_seed(&i.to_le_bytes(), seed))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn start_matches_binary_search(n in 1usize..40, vnodes in 1u32..60, seed: u64, random: Vec<u64>) {
        let ring = ring_of(&RingConfig::new(seed, vnodes).unwrap(), &ids(n));
        for key in probe_keys(&ring).chain(random) {
            prop_assert_eq!(ring.start(key), ring.points.partition_point(|p| p.hash < key));
            prop_assert_eq!(ring.primary(key), ring.walk(key).next());
        }
    }

    #[test]
    fn start_matches_binary_search_with_collisions(
        hashes in prop::collection::vec(prop_oneof![any::<u64>(), 0u64..64, Just(u64::MAX)], 1..200),
        members in 1usize..6,
        random: Vec<u64>,
    ) {
        let ring = ring_of_points(&hashes, members);
        for key in probe_keys(&ring).chain(random) {
            prop_assert_eq!(ring.start(key), ring.points.partition_point(|p| p.hash < key));
            prop_assert_eq!(ring.primary(key), ring.walk(key).next());
            // Whether the index gave the first owner or the points did.
            prop_assert_eq!(ring.walk(key).collect::<Vec<_>>(), reference_walk(&ring, key));
        }
    }

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

mod points;
