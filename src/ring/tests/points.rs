//! Rings built with explicit point counts (staged members).

use super::*;

fn with_points(config: &RingConfig, counts: &[u32]) -> Ring {
    let members = ids(counts.len()).into_iter().zip(counts.iter().copied());
    Ring::build_with_points(config, members).unwrap()
}

#[test]
fn full_counts_build_the_same_ring() {
    let c = RingConfig::new(7, 40).unwrap();
    let weights = [1, 3, 2, 1, 5];
    let members = ids(weights.len()).into_iter().zip(weights);
    let built = Ring::build(&c, members).unwrap();
    let counts: Vec<u32> = weights.iter().map(|w| w * 40).collect();
    let staged = with_points(&c, &counts);
    assert_eq!(staged.points(), built.points());
    for key in keys(3, 2_000).chain([0, u64::MAX]) {
        assert_eq!(
            staged.walk(key).collect::<Vec<_>>(),
            built.walk(key).collect::<Vec<_>>()
        );
    }
}

#[test]
fn a_member_without_points_is_never_walked() {
    let c = RingConfig::default();
    let ring = with_points(&c, &[150, 0, 150, 0]);
    assert_eq!((ring.len(), ring.points()), (4, 300));
    for key in keys(1, 1_000).chain([0, u64::MAX]) {
        let walk: Vec<usize> = ring.walk(key).collect();
        assert_eq!(walk.len(), 2, "only the members with points");
        assert!(walk.iter().all(|&i| i == 0 || i == 2));
        assert_eq!(ring.primary(key), walk.first().copied());
        assert_eq!(ring.owners(key, 3).count(), 2);
    }
    let none = with_points(&c, &[0, 0]);
    assert_eq!((none.len(), none.points()), (2, 0));
    assert_eq!(none.walk(42).next(), None);
    assert_eq!(none.primary(42), None);
}

#[test]
fn a_walk_bounds_what_it_has_left() {
    let ring = with_points(&RingConfig::default(), &[150, 0, 150, 150]);
    for key in keys(2, 64).chain([0, u64::MAX]) {
        let mut walk = ring.walk(key);
        assert_eq!(walk.size_hint(), (0, Some(3)), "members holding points");
        walk.next();
        assert_eq!(walk.size_hint(), (0, Some(2)));
        assert_eq!(walk.by_ref().count(), 2);
        assert_eq!(walk.size_hint(), (0, Some(0)));
    }
}

#[test]
fn rejects_duplicates_and_too_many_points() {
    let c = RingConfig::default();
    let id = ids(2);
    let dup = [(id[0].clone(), 1), (id[0].clone(), 0)];
    assert_eq!(
        Ring::build_with_points(&c, dup).unwrap_err().field,
        "backend_id"
    );
    let huge = [(id[0].clone(), MAX_POINTS as u32), (id[1].clone(), 1)];
    assert_eq!(
        Ring::build_with_points(&c, huge).unwrap_err().field,
        "points"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// A growing member takes keys only from the others, and only keys it
    /// owns at full weight: its points are a prefix of its full set.
    #[test]
    fn growing_a_member_moves_keys_only_to_it(n in 2usize..8, grow in 0usize..8, from in 0u32..150, seed: u64) {
        let grow = grow % n;
        let c = RingConfig::new(seed, 150).unwrap();
        let mut counts = vec![150; n];
        counts[grow] = from;
        let before = with_points(&c, &counts);
        counts[grow] = from + (150 - from) / 2;
        let after = with_points(&c, &counts);
        let full = with_points(&c, &vec![150; n]);
        for key in keys(seed, 1_000) {
            let (b, a) = (before.primary(key), after.primary(key));
            if a != b {
                prop_assert_eq!(a, Some(grow));
            }
            if a == Some(grow) {
                prop_assert_eq!(full.primary(key), Some(grow));
            }
        }
    }
}

/// Was the doc example of `Ring::build_with_points` while it was public.
#[test]
fn a_joining_member_with_no_points_owns_nothing() {
    let config = RingConfig::default();
    let id = |i: usize| BackendId::new(&format!("node-{i}")).unwrap();
    let full = Ring::build(&config, (0..3).map(|i| (id(i), 1))).unwrap();
    let same = Ring::build_with_points(&config, (0..3).map(|i| (id(i), 150))).unwrap();
    let joining =
        Ring::build_with_points(&config, [(id(0), 150), (id(1), 150), (id(2), 0)]).unwrap();
    for key in [1, 1 << 40, u64::MAX] {
        assert_eq!(full.primary(key), same.primary(key));
        assert_ne!(joining.primary(key), Some(2), "node-2 owns nothing yet");
        assert_eq!(joining.walk(key).count(), 2);
    }
}
