use proptest::prelude::*;

use super::*;
use crate::health::signals::{capacity, LoadSignals};

const SEC: Duration = Duration::from_secs(1);

fn policy() -> HealthConfig {
    HealthConfig::default()
}

/// An interval of `calls` requests, `failures` of them failed, all timed at
/// a p99 of `p99_ms`.
fn obs(calls: u64, failures: u64, p99_ms: f64) -> Observation {
    Observation {
        calls,
        failures,
        timed: calls,
        answered: calls,
        p99_ms: Some(p99_ms),
        ..Observation::default()
    }
}

fn run(p: &HealthConfig, state: &mut HealthState, o: Observation) {
    evaluate(p, &mut [(state, o)], SEC);
}

/// Three peers answering 20 requests an interval at a p99 of 10 ms.
fn peers() -> [HealthState; 3] {
    std::array::from_fn(|_| HealthState::new(false))
}

/// One interval of `state` beside `peers` serving at 10 ms.
fn run_with_peers(
    p: &HealthConfig,
    state: &mut HealthState,
    peers: &mut [HealthState],
    o: Observation,
) {
    let mut fleet: Vec<_> = std::iter::once((state, o))
        .chain(peers.iter_mut().map(|s| (s, obs(20, 0, 10.0))))
        .collect();
    evaluate(p, &mut fleet, SEC);
}

#[test]
fn a_score_oscillating_around_the_ejection_threshold_does_not_flap() {
    // Every outcome weighs fully: the score is 1 − the interval's error rate.
    let p = HealthConfig::builder().error_alpha(1.0).build().unwrap();
    let mut s = HealthState::new(false);
    let mut toggles = 0;
    let mut was = s.ejected();
    for i in 0..40 {
        let failures = if i % 2 == 0 { 81 } else { 79 }; // 0.19, 0.21
        run(&p, &mut s, obs(100, failures, 10.0));
        toggles += usize::from(s.ejected() != was);
        was = s.ejected();
    }
    assert_eq!(toggles, 1, "ejected once, then held out");
    assert_eq!(s.ejected(), Some(Ejection::Score));
    run(&p, &mut s, obs(100, 70, 10.0)); // 0.30: still below readmit
    assert_eq!(s.ejected(), Some(Ejection::Score));
    run(&p, &mut s, obs(100, 60, 10.0)); // 0.40
    assert_eq!(s.ejected(), None, "readmitted above 0.35");
}

#[test]
fn failing_fast_scores_zero_not_fast() {
    let p = policy();
    let mut s = HealthState::new(false);
    for _ in 0..10 {
        run(&p, &mut s, obs(50, 0, 20.0));
    }
    assert!(s.score() > 0.99, "{}", s.score());
    // Failures in 1 ms are recorded at the 1 s penalty.
    for _ in 0..3 {
        run(&p, &mut s, obs(50, 50, 1_000.0));
    }
    assert!(s.score() < 0.01, "{}", s.score());
    assert_eq!(s.ejected(), Some(Ejection::Score));
}

#[test]
fn without_data_the_score_relaxes_toward_neutral() {
    let p = policy();
    let mut s = HealthState::new(false);
    run(&p, &mut s, obs(20, 0, 20.0));
    run(&p, &mut s, obs(50, 50, 1_000.0));
    assert_eq!(s.ejected(), Some(Ejection::Score));
    let mut readmitted_after = None;
    for second in 1..=120 {
        run(&p, &mut s, Observation::default());
        if s.ejected().is_none() {
            readmitted_after = Some(second);
            break;
        }
    }
    let after = readmitted_after.expect("an old penalty is not kept forever");
    assert!((5..=60).contains(&after), "{after} s");
}

#[test]
fn a_backend_turning_slow_is_ejected_as_an_outlier_then_readmitted() {
    // Beside three peers: alone, no backend is an outlier (it was before,
    // judged against its own baseline only: issue 39).
    let p = policy();
    let mut s = HealthState::new(false);
    let mut others = peers();
    for _ in 0..30 {
        run_with_peers(&p, &mut s, &mut others, obs(20, 0, 10.0));
    }
    let mut ejected_after = None;
    for second in 1..=20 {
        run_with_peers(&p, &mut s, &mut others, obs(20, 0, 200.0));
        if s.ejected().is_some() {
            ejected_after = Some(second);
            break;
        }
    }
    assert_eq!(s.ejected(), Some(Ejection::Outlier));
    assert_eq!(
        ejected_after,
        Some(5),
        "5 intervals over 3x its peers and 50 ms (smoothed) in a row"
    );
    let baseline = s.status(&p).baseline_ms.unwrap();
    assert!(
        baseline < 20.0,
        "the baseline does not learn the slowness: {baseline}"
    );
    // Out for the base ejection time, with no traffic.
    for _ in 0..29 {
        run_with_peers(&p, &mut s, &mut others, Observation::default());
        assert_eq!(s.ejected(), Some(Ejection::Outlier));
    }
    run_with_peers(&p, &mut s, &mut others, Observation::default());
    assert_eq!(s.ejected(), None);
    // Still slow: out again, twice as long.
    for _ in 0..10 {
        run_with_peers(&p, &mut s, &mut others, obs(20, 0, 200.0));
        if s.ejected().is_some() {
            break;
        }
    }
    assert_eq!(s.ejected(), Some(Ejection::Outlier));
    assert_eq!(s.remaining, 60 * SEC);
}

#[test]
fn a_backend_healed_after_failing_is_not_an_outlier() {
    // Found by the chaos suite: a backend answering 503 for a few seconds
    // then healed was ejected as a latency outlier for 30 s, its smoothed
    // p99 still full of failure penalties while it served fast again.
    let p = policy();
    let mut s = HealthState::new(false);
    for _ in 0..30 {
        run(&p, &mut s, obs(20, 0, 10.0));
    }
    for _ in 0..3 {
        run(&p, &mut s, obs(20, 20, 1_000.0));
    }
    for second in 1..=10 {
        run(&p, &mut s, obs(20, 0, 10.0));
        assert_eq!(s.ejected(), None, "second {second}: {:?}", s.status(&p));
    }
    assert!(s.status(&p).p99_ms.unwrap() < 50.0, "the penalty faded");
}

#[test]
fn a_passing_queue_is_not_an_outlier() {
    let p = policy();
    let mut s = HealthState::new(false);
    for _ in 0..30 {
        run(&p, &mut s, obs(20, 0, 10.0));
    }
    // One interval queued behind a cold load: p99 15x.
    run(&p, &mut s, obs(20, 0, 150.0));
    assert!(s.status(&p).p99_ms.unwrap() > 50.0, "over 5x, smoothed");
    for _ in 0..10 {
        run(&p, &mut s, obs(20, 0, 10.0));
        assert_eq!(s.ejected(), None);
    }
}

#[test]
fn an_outlier_must_be_slow_5_intervals_with_data_in_a_row_and_not_failing() {
    let p = policy();
    let mut s = HealthState::new(false);
    let mut others = peers();
    run_with_peers(&p, &mut s, &mut others, obs(1, 0, 10.0));
    // Slow in every interval with data; those without neither count nor
    // break the run.
    for timed in [1, 1, 0, 1, 0, 1] {
        let slow = Observation {
            p99_ms: (timed > 0).then_some(1_000.0),
            ..obs(timed, 0, 1_000.0)
        };
        run_with_peers(&p, &mut s, &mut others, slow);
    }
    assert!(s.status(&p).p99_ms.unwrap() > 50.0);
    assert_eq!(s.ejected(), None, "4 slow intervals are too few");
    run_with_peers(&p, &mut s, &mut others, obs(1, 0, 1_000.0));
    assert_eq!(s.ejected(), Some(Ejection::Outlier), "5 are enough");

    let mut failing = HealthState::new(false);
    let mut others = peers();
    run_with_peers(&p, &mut failing, &mut others, obs(20, 0, 10.0));
    let slow_and_failing = Observation {
        failures: 12,
        ..obs(20, 0, 1_000.0)
    };
    run_with_peers(&p, &mut failing, &mut others, slow_and_failing);
    run_with_peers(&p, &mut failing, &mut others, slow_and_failing);
    assert!(failing.status(&p).error_rate >= FAILING);
    assert_ne!(
        failing.ejected(),
        Some(Ejection::Outlier),
        "failing, not slow"
    );
}

#[test]
fn no_more_than_the_share_is_ejected_worst_first() {
    let p = policy();
    let mut states: Vec<HealthState> = (0..8).map(|_| HealthState::new(false)).collect();
    let fails = [50, 45, 48, 49, 0, 0, 0, 0];
    let mut fleet: Vec<_> = states
        .iter_mut()
        .zip(fails)
        .map(|(s, f)| (s, obs(50, f, if f > 0 { 1_000.0 } else { 10.0 })))
        .collect();
    for _ in 0..5 {
        evaluate(&p, &mut fleet, SEC);
    }
    let out: Vec<bool> = fleet.iter().map(|(s, _)| s.ejected().is_some()).collect();
    assert_eq!(out, [true, false, false, true, false, false, false, false]);
    // The two others asking are held: in only by the cap.
    let held: Vec<bool> = fleet.iter().map(|(s, _)| s.held()).collect();
    assert_eq!(held, [false, true, true, false, false, false, false, false]);
    assert!(fleet[1].0.status(&p).held_by_cap);
    // Healed, they ask no more, and are held no more.
    for (_, o) in fleet.iter_mut().skip(1).take(2) {
        *o = obs(50, 0, 10.0);
    }
    for _ in 0..40 {
        evaluate(&p, &mut fleet, SEC);
    }
    assert!(fleet.iter().all(|(s, _)| !s.held()));
}

#[test]
fn capacity_uses_kv_cache_and_queue_depth_else_free_gpu_memory() {
    let p = policy();
    let load = |kv, waiting, used, total| LoadSignals {
        kv_cache_usage: kv,
        requests_waiting: waiting,
        gpu_memory_used_bytes: used,
        gpu_memory_total_bytes: total,
        ..LoadSignals::default()
    };
    let c = |l: LoadSignals, meta| capacity(&p, &l, meta);
    assert_eq!(c(load(None, None, None, None), None), None);
    assert_eq!(c(load(Some(0.25), None, None, None), None), Some(0.75));
    assert_eq!(c(load(None, Some(40.0), None, None), None), Some(1.0 / 6.0));
    assert_eq!(c(load(Some(0.25), Some(8.0), None, None), None), Some(0.5));
    assert_eq!(
        c(load(None, None, Some(30.0), Some(40.0)), None),
        Some(0.25)
    );
    assert_eq!(c(load(None, None, Some(30.0), None), Some(40)), Some(0.25));
    assert_eq!(
        c(load(None, None, Some(30.0), None), None),
        None,
        "no total"
    );
    assert_eq!(
        c(load(Some(0.5), None, Some(1.0), Some(2.0)), None),
        Some(0.5),
        "LLM signals first"
    );
    assert_eq!(c(load(Some(f64::NAN), None, None, None), None), None);
    assert_eq!(
        c(load(Some(85.0), None, None, None), None),
        None,
        "a percentage"
    );
}

#[test]
fn a_deep_queue_lowers_the_score_and_connection_pressure_too() {
    let p = policy();
    let mut s = HealthState::new(false);
    let deep = Observation {
        load: Some(LoadSignals {
            requests_waiting: Some(40.0),
            ..LoadSignals::default()
        }),
        ..Observation::default()
    };
    run(&p, &mut s, deep);
    let expected = 0.5 + 0.33 / 6.0 + 0.17;
    assert!((s.score() - expected).abs() < 1e-9, "{}", s.score());
    let busy = Observation {
        in_flight: 350,
        ..Observation::default()
    };
    let mut s = HealthState::new(false);
    run(&p, &mut s, busy);
    assert!((s.status(&p).connection - 0.5).abs() < 1e-9);
}

#[test]
fn a_joining_backend_warms_up_from_the_min_weight() {
    let p = policy();
    let mut s = HealthState::new(true);
    assert!((s.weight(&p) - 0.5).abs() < 1e-9);
    for _ in 0..5 {
        run(&p, &mut s, Observation::default());
    }
    assert!((s.weight(&p) - 0.75).abs() < 1e-9, "{}", s.weight(&p));
    for _ in 0..5 {
        run(&p, &mut s, Observation::default());
    }
    assert_eq!(s.weight(&p), 1.0);
    assert_eq!(
        HealthState::new(false).weight(&p),
        1.0,
        "the first set does not warm up"
    );
}

#[test]
fn the_baseline_follows_down_quickly_and_up_slowly() {
    let p = policy();
    let mut s = HealthState::new(false);
    run(&p, &mut s, obs(20, 0, 100.0));
    for _ in 0..10 {
        run(&p, &mut s, obs(20, 0, 10.0));
    }
    let base = s.status(&p).baseline_ms.unwrap();
    assert!(base < 20.0, "{base}");
    for _ in 0..10 {
        run(&p, &mut s, obs(3, 0, 30.0));
    }
    let base = s.status(&p).baseline_ms.unwrap();
    assert!(base < 15.0, "{base}");
}

proptest! {
    #[test]
    fn scores_stay_in_range_and_ejections_within_the_share(
        rounds in prop::collection::vec(
            prop::collection::vec((0u64..200, 0u64..200, prop::option::of(0.0f64..5_000.0), 0usize..1_000, prop::option::of(0.0f64..100.0)), 6),
            1..40,
        ),
        share in 0.0f64..=1.0,
    ) {
        let p = HealthConfig::builder().max_ejected_share(share).build().unwrap();
        let mut states: Vec<HealthState> = (0..6).map(|i| HealthState::new(i % 2 == 0)).collect();
        for round in rounds {
            let mut fleet: Vec<_> = states
                .iter_mut()
                .zip(round)
                .map(|(s, (calls, failures, p99_ms, in_flight, waiting))| {
                    let o = Observation {
                        calls,
                        failures,
                        timed: calls,
                        answered: calls,
                        sent: calls,
                        p99_ms,
                        in_flight,
                        load: waiting.map(|w| LoadSignals { requests_waiting: Some(w), ..LoadSignals::default() }),
                        gpu_memory_bytes: None,
                    };
                    (s, o)
                })
                .collect();
            evaluate(&p, &mut fleet, SEC);
            let out = fleet.iter().filter(|(s, _)| s.ejected().is_some()).count();
            prop_assert!(out <= p.max_ejected(6));
            // Only a full cap holds a backend in.
            let held = fleet.iter().filter(|(s, _)| s.held()).count();
            prop_assert!(held == 0 || out == p.max_ejected(6), "{held} held, {out} out");
            for (s, _) in &fleet {
                let st = s.status(&p);
                prop_assert!((0.0..=1.0).contains(&st.score));
                prop_assert!((0.0..=1.0).contains(&st.weight));
                prop_assert!((0.0..=1.0).contains(&st.error_rate));
            }
        }
    }
}

#[test]
fn a_fleet_slowed_as_a_whole_has_no_outlier_but_one_slow_backend_is() {
    let p = policy();
    let run_fleet = |slow: &[bool]| {
        let mut states: Vec<HealthState> = slow.iter().map(|_| HealthState::new(false)).collect();
        for round in 0..40 {
            let mut fleet: Vec<_> = states
                .iter_mut()
                .zip(slow)
                .map(|(s, &slow)| {
                    let p99 = if round >= 30 && slow { 100.0 } else { 10.0 };
                    (s, obs(20, 0, p99))
                })
                .collect();
            evaluate(&p, &mut fleet, SEC);
        }
        states.iter().map(|s| s.ejected()).collect::<Vec<_>>()
    };
    assert_eq!(
        run_fleet(&[true; 4]),
        [None; 4],
        "all slowed: load, not a sick backend"
    );
    assert_eq!(
        run_fleet(&[false, true, false, false]),
        [None, Some(Ejection::Outlier), None, None]
    );
}
