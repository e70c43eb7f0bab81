use proptest::prelude::*;

use super::*;

fn ids(n: usize) -> Vec<BackendId> {
    (0..n)
        .map(|i| BackendId::new(&format!("backend-{i}")).unwrap())
        .collect()
}

fn counts<'a>(ids: &'a [BackendId], current: &[u32], target: &[u32]) -> Vec<Counts<'a>> {
    ids.iter()
        .zip(current.iter().zip(target))
        .map(|(id, (&current, &target))| Counts {
            id,
            current,
            target,
        })
        .collect()
}

/// Steps from `current` to `target`, returning every intermediate state
/// (the last one settled); panics past `limit` steps.
fn steps(
    ids: &[BackendId],
    current: &[u32],
    target: &[u32],
    share: f64,
    limit: usize,
) -> Vec<Vec<u32>> {
    let mut now = current.to_vec();
    let mut all = Vec::new();
    while !settled(&counts(ids, &now, target)) {
        now = step(&counts(ids, &now, target), share);
        all.push(now.clone());
        assert!(all.len() <= limit, "not settled in {limit} steps");
    }
    all
}

#[test]
fn four_joining_eight_take_five_steps_of_a_tenth_each() {
    let ids = ids(12);
    let current: Vec<u32> = (0..12).map(|i| if i < 8 { 150 } else { 0 }).collect();
    let all = steps(&ids, &current, &[150; 12], 0.1, 5);
    let totals: Vec<u32> = all.iter().map(|s| s.iter().sum()).collect();
    assert_eq!(totals, [1320, 1452, 1598, 1758, 1800]);
    assert_eq!(
        all[0][8..],
        [30, 30, 30, 30],
        "the joiners warm up together"
    );
    assert!(
        all.iter().all(|s| s[..8] == [150; 8]),
        "the others keep theirs"
    );
}

#[test]
fn one_joining_eight_lands_in_one_step_at_a_fifth() {
    let ids = ids(9);
    let mut current = vec![150; 9];
    current[8] = 0;
    assert_eq!(steps(&ids, &current, &[150; 9], 0.2, 1).len(), 1);
    // At a tenth, 120 points then the last 30.
    let all = steps(&ids, &current, &[150; 9], 0.1, 2);
    assert_eq!((all[0][8], all[1][8]), (120, 150));
}

#[test]
fn an_empty_ring_or_a_whole_share_lands_at_once() {
    let ids = ids(3);
    assert_eq!(step(&counts(&ids, &[0; 3], &[150; 3]), 0.1), [150; 3]);
    let one = counts(&ids, &[150, 0, 0], &[150, 300, 450]);
    assert_eq!(step(&one, 1.0), [150, 300, 450]);
}

#[test]
fn budgets_round_up_exactly() {
    assert_eq!(budget(30, 0.1), 3);
    assert_eq!(budget(31, 0.1), 4);
    assert_eq!(budget(1452, 0.1), 146);
    assert_eq!(budget(5, 0.01), 1, "at least one point");
    assert_eq!(budget(1200, 1.0), 1200);
}

#[test]
fn a_weight_cut_is_staged_too() {
    let ids = ids(4);
    let all = steps(&ids, &[600, 150, 150, 150], &[150; 4], 0.1, 10);
    assert_eq!(
        all[0],
        [495, 150, 150, 150],
        "ceil(0.1 × 1050) = 105 points"
    );
    assert!(all.windows(2).all(|w| w[1][0] < w[0][0]));
}

#[test]
fn leftover_points_go_to_the_largest_remainders_then_by_id() {
    let ids = ids(3);
    // Budget 1 between three equal distances: the first ID takes it.
    let c = counts(&ids, &[10, 0, 0], &[10, 5, 5]);
    assert_eq!(step(&c, 0.1), [10, 1, 0]);
    let c = counts(&ids, &[10, 0, 0], &[10, 1, 5]);
    assert_eq!(step(&c, 0.1), [10, 0, 1], "5/6 of a point beats 1/6");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn steps_are_bounded_monotone_and_converge(
        pairs in prop::collection::vec((0u32..2_000, 0u32..2_000), 1..24),
        share in prop_oneof![Just(1.0), 0.01f64..1.0],
    ) {
        let ids = ids(pairs.len());
        let (start, target): (Vec<u32>, Vec<u32>) = pairs.into_iter().unzip();
        let distance: u64 = start.iter().zip(&target).map(|(a, b)| u64::from(a.abs_diff(*b))).sum();
        let mut now = start.clone();
        for _ in 0..=distance {
            if settled(&counts(&ids, &now, &target)) {
                break;
            }
            let total: u64 = now.iter().map(|&c| u64::from(c)).sum();
            let next = step(&counts(&ids, &now, &target), share);
            let changed: u64 = now.iter().zip(&next).map(|(a, b)| u64::from(a.abs_diff(*b))).sum();
            if next != target {
                prop_assert!(total > 0 && share < 1.0, "a ring with no points lands at once");
                prop_assert_eq!(changed, budget(total, share));
            }
            for i in 0..ids.len() {
                let (lo, hi) = (start[i].min(target[i]), start[i].max(target[i]));
                prop_assert!((lo..=hi).contains(&next[i]), "between start and target");
                prop_assert!(next[i].abs_diff(target[i]) <= now[i].abs_diff(target[i]));
            }
            now = next;
        }
        prop_assert_eq!(now, target);
    }

    #[test]
    fn the_order_of_members_does_not_matter(
        pairs in prop::collection::vec((0u32..500, 0u32..500), 2..16),
        rotate in 0usize..16,
        share in 0.01f64..1.0,
    ) {
        let ids = ids(pairs.len());
        let (current, target): (Vec<u32>, Vec<u32>) = pairs.into_iter().unzip();
        let forward = step(&counts(&ids, &current, &target), share);
        let mut shuffled = counts(&ids, &current, &target);
        shuffled.rotate_left(rotate % ids.len());
        shuffled.reverse();
        let back = step(&shuffled, share);
        for (m, points) in shuffled.iter().zip(back) {
            let i = ids.iter().position(|id| id == m.id).unwrap();
            prop_assert_eq!(forward[i], points);
        }
    }
}
