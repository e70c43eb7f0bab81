//! Update picks: P2C and its sampling.

use super::*;
use crate::balance::state::cost::{at_floor, compare};

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

    /// P2C takes one of the two sampled backends: one above the health
    /// floor over one at it, else the cheaper by DESIGN.md's cost
    /// (in-flight, latency and health together) when their costs are
    /// further apart than the tie band — whatever their in-flight counts.
    #[test]
    fn update_takes_the_cheaper_of_the_sampled_pair(
        backends in proptest::collection::vec((0usize..50, 1u64..500, 0.0f64..=1.0), 2..12),
        x: u64,
        y: u64,
    ) {
        let t = table(backends.len());
        for (i, &(load, latency_ms, health)) in backends.iter().enumerate() {
            set_load(&t, i, load);
            t.backends[i].latency.record(Duration::from_millis(latency_ms), Outcome::Success);
            t.backends[i].health.score.set(health);
        }
        let costs: Vec<f64> = t.backends.iter().map(|b| b.cost()).collect();
        let [a, b] = {
            let mut values = [x, y].into_iter();
            sample2(backends.len() as u64, &mut || values.next().unwrap())
        };
        // The pair, then the draw between two with as many in flight.
        let mut values = [x, y].into_iter().chain(std::iter::repeat(x ^ y));
        let update = route("m").with_kind(RequestKind::Update);
        let p = pick_with(&t, &ask(&update, 0), &mut || values.next().unwrap()).unwrap();
        prop_assert!(p.index == a || p.index == b);
        prop_assert_eq!(p.branch, Branch::Update);
        let floor = |i: usize| at_floor(t.backends[i].health.score.get());
        if floor(a) != floor(b) {
            prop_assert!(!floor(p.index), "the backend above the floor");
        } else if compare(costs[a], costs[b]) != std::cmp::Ordering::Equal {
            prop_assert_eq!(costs[p.index], costs[a].min(costs[b]));
        }
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
