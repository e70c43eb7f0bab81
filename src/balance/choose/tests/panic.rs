//! Panic mode, the load cap over a staged ring.

use super::*;

/// What `in_panic` decides, by a scan of every backend.
fn panic_by_scan(t: &Table, threshold: f64) -> bool {
    let now = Instant::now();
    let eligible = t.backends.iter().filter(|b| b.eligible(now)).count();
    threshold > 0.0
        && (t.fleet.gauges.not_closed.load(Relaxed) > 0 || t.fleet.gauges.ejected.load(Relaxed) > 0)
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
    assert_eq!(t.fleet.gauges.removed.load(Relaxed), 4);
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
    assert_eq!(fleet.gauges.removed.load(Relaxed), 0);
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

/// In panic mode the cost is no guide (health at the floor, estimates
/// full of failure penalties): between two backends with as many in
/// flight, updates and a model's two owners alike split evenly, however
/// their estimates differ; with more in flight on one, the other.
#[tokio::test(start_paused = true)]
async fn panic_mode_splits_evenly_whatever_the_estimates() {
    let t = table(2);
    trip(&t, 0);
    trip(&t, 1);
    assert!(in_panic(&t, 0.5, &Now::lazy()));
    t.backends[0]
        .latency
        .record(Duration::from_millis(30), Outcome::Success);
    t.backends[1]
        .latency
        .record(Duration::from_millis(5), Outcome::Failure);
    assert!(t.backends[0].cost() < t.backends[1].cost() / 5.0);
    let update = route("m").with_kind(RequestKind::Update);
    let model = route("llama");
    make_resident(&t, 0, &model);
    make_resident(&t, 1, &model);
    let mut random = lcg(9);
    for route in [&update, &model] {
        let mut on_0 = 0;
        for _ in 0..1_000 {
            let p = pick_with(&t, &ask(route, 2), &mut random).unwrap();
            assert_eq!(p.branch, Branch::Panic);
            on_0 += usize::from(p.index == 0);
        }
        assert!((450..=550).contains(&on_0), "{on_0} of 1,000 on one");
    }
    set_load(&t, 0, 1);
    for _ in 0..20 {
        let p = pick_with(&t, &ask(&update, 0), &mut random).unwrap();
        assert_eq!(p.index, 1, "fewer in flight");
    }
}
