//! The outlier rule on issue 39's shapes: like compared with like.

use std::time::Duration;

use super::{OUTLIER_INTERVALS, SILENT_BARS, SILENT_REQUESTS};
use crate::health::score::{evaluate, Ejection, HealthState, Observation};
use crate::health::HealthConfig;

const SEC: Duration = Duration::from_secs(1);

fn policy() -> HealthConfig {
    HealthConfig::default()
}

/// One interval of a fleet, an observation per backend.
fn run_fleet(p: &HealthConfig, states: &mut [HealthState], round: &[Observation]) {
    let mut fleet: Vec<_> = states.iter_mut().zip(round.iter().copied()).collect();
    evaluate(p, &mut fleet, SEC);
}

/// An interval of `timed` answers at a p99 of `p99_ms`, `in_flight` at its
/// end.
fn serving(timed: u64, p99_ms: f64, in_flight: usize) -> Observation {
    Observation {
        calls: timed,
        timed,
        answered: timed,
        p99_ms: (timed > 0).then_some(p99_ms),
        in_flight,
        ..Observation::default()
    }
}

/// Issue 39's workload: four chats growing to ~1,000 tokens of history,
/// prefix affinity putting three on `a` and one on `b`; the time to first
/// token grows with the prompt and with the requests in flight there.
/// The p99 of `a` runs over 5× its early baseline and 3× that of `b`:
/// neither is sickness.
#[test]
fn chats_growing_under_affinity_eject_nothing() {
    let p = policy();
    let mut states = [HealthState::new(false), HealthState::new(false)];
    // TTFT ≈ 20 ms + 0.2 ms a token per request in flight, ±15%.
    let ttft = |tokens: f64, load: f64, round: usize| {
        let jitter = 1.0 + 0.15 * ((round * 7919 % 13) as f64 / 6.0 - 1.0);
        (20.0 + 0.2 * tokens * load) * jitter
    };
    let mut worst = 0.0f64;
    for round in 0..600 {
        // A turn a second, 50 tokens more history each, up to 1,000.
        let tokens = (50.0 + round as f64 * 50.0).min(1_000.0);
        let a_load = if round % 3 == 0 { 2 } else { 3 };
        let b_timed = if round % 4 == 3 { 0 } else { 1 };
        let round_obs = [
            serving(2, ttft(tokens, a_load as f64, round), a_load),
            serving(b_timed, ttft(tokens, 1.0, round + 5), 1),
        ];
        run_fleet(&p, &mut states, &round_obs);
        for (name, s) in ["a", "b"].iter().zip(&states) {
            assert_eq!(
                s.ejected(),
                None,
                "round {round}: {name} {:?}",
                s.status(&p)
            );
        }
        let a = states[0].status(&p);
        worst = worst.max(a.p99_ms.unwrap() / a.baseline_ms.unwrap());
    }
    assert!(worst > 5.0, "the workload's shape: {worst}");
}

/// Each request 5× slower at equal load (and the same growing prompts):
/// ejected within the bound, 4 intervals for the smoothed latency to
/// cross 4× (latency_alpha 0.3) then 5 in a row; the healthy one is not.
#[test]
fn a_backend_5x_slower_at_equal_load_is_ejected_within_the_bound() {
    let p = policy();
    let mut states = [HealthState::new(false), HealthState::new(false)];
    let mut ejected_after = None;
    for round in 0..120 {
        let tokens = (50.0 + round as f64 * 50.0).min(1_000.0);
        let ttft = 20.0 + 0.2 * tokens * 2.0;
        let slow = if round >= 60 { 5.0 } else { 1.0 };
        run_fleet(
            &p,
            &mut states,
            &[serving(4, ttft, 2), serving(4, ttft * slow, 2)],
        );
        assert_eq!(states[0].ejected(), None, "round {round}");
        if states[1].ejected().is_some() {
            ejected_after = Some(round + 1 - 60);
            break;
        }
    }
    assert_eq!(states[1].ejected(), Some(Ejection::Outlier));
    let after = ejected_after.unwrap();
    assert!(after <= 4 + OUTLIER_INTERVALS as usize, "{after} intervals");
}

/// A server that stops answering (SIGSTOP): its requests stay in flight,
/// the caller's timeouts drop them, no head or outcome comes back.
/// Ejected within the failure penalty (1 s) plus 5 intervals, while its
/// peer answers; a whole fleet gone silent ejects nothing.
#[test]
fn a_backend_that_answers_nothing_is_ejected_within_the_bound() {
    let p = policy();
    let silent = |in_flight| Observation {
        calls: 1, // dropped by the caller's timeout: finished, unanswered
        in_flight,
        ..Observation::default()
    };
    let run_case = |both: bool| {
        let mut states = [HealthState::new(false), HealthState::new(false)];
        for round in 0..40 {
            let b = match round {
                0..30 => serving(4, 200.0, 2),
                _ => silent(2 + round - 30),
            };
            let a = match (both, round) {
                (true, 30..) => silent(2 + round - 30),
                _ => serving(4, 200.0, 2),
            };
            run_fleet(&p, &mut states, &[a, b]);
            if states[1].ejected().is_some() {
                return Some(round + 1 - 30);
            }
        }
        None
    };
    let after = run_case(false).expect("ejected");
    assert!(
        after <= 1 + 1 + OUTLIER_INTERVALS as usize,
        "{after} intervals"
    );
    assert_eq!(
        run_case(true),
        None,
        "no peer answers: not one sick backend"
    );
}

/// A silent backend whose every attempt a hedge's backup outran: requests
/// sent to it each interval, none answered, none left in flight at the
/// interval's end (each dropped once the backup won). Silent all the
/// same, and ejected within the bound (found against a SIGSTOPped vLLM
/// behind the gateway: its error rate came from the probes alone).
#[test]
fn a_silent_backend_whose_attempts_hedges_cancel_is_ejected() {
    let p = policy();
    let outrun = Observation {
        calls: 3, // dropped when the backup won: finished, unanswered
        sent: 3,
        ..Observation::default()
    };
    let mut states = [HealthState::new(false), HealthState::new(false)];
    let mut ejected_after = None;
    for round in 0..40 {
        let b = match round {
            0..30 => serving(4, 200.0, 1),
            _ => outrun,
        };
        run_fleet(&p, &mut states, &[serving(4, 200.0, 1), b]);
        if states[1].ejected().is_some() {
            ejected_after = Some(round + 1 - 30);
            break;
        }
    }
    let after = ejected_after.expect("ejected");
    assert!(
        after <= 1 + 1 + OUTLIER_INTERVALS as usize,
        "{after} intervals"
    );
    assert_eq!(states[0].ejected(), None);
}

/// A silent backend the balancer sends less as its score falls: some
/// intervals it is sent nothing and has nothing in flight. Those carry no
/// evidence and neither end its silence nor reset its count: it is
/// ejected within the bound counted in busy intervals (found against a
/// SIGSTOPped vLLM in the suite: every idle interval restarted the count,
/// and it stayed in rotation past 10 s).
#[test]
fn a_silent_backend_sent_nothing_some_intervals_is_still_ejected() {
    let p = policy();
    let outrun = Observation {
        calls: 3,
        sent: 3,
        ..Observation::default()
    };
    let mut states = [HealthState::new(false), HealthState::new(false)];
    let (mut busy, mut ejected_after) = (0, None);
    for round in 0..60 {
        let b = match round {
            0..30 => serving(4, 200.0, 1),
            // Every other interval, nothing sent and nothing in flight.
            _ if round % 2 == 1 => Observation::default(),
            _ => outrun,
        };
        busy += usize::from(round >= 30 && round % 2 == 0);
        run_fleet(&p, &mut states, &[serving(4, 200.0, 1), b]);
        if states[1].ejected().is_some() {
            ejected_after = Some(busy);
            break;
        }
    }
    let after = ejected_after.expect("ejected");
    assert!(
        after <= 1 + 1 + OUTLIER_INTERVALS as usize,
        "{after} busy intervals"
    );
    assert_eq!(states[0].ejected(), None);
}

/// A silent backend sent enough requests to judge: once silent past
/// [`SILENT_BARS`] bars (of the failure penalty, 1 s) with
/// [`SILENT_REQUESTS`] sent since its last answer, it is ejected at once,
/// not after 5 slow intervals (a
/// SIGSTOPped vLLM behind the gateway's hedge stayed in rotation past
/// 10 s on a loaded machine while the interval count ran).
#[test]
fn a_silent_backend_with_enough_requests_unanswered_is_ejected_at_once() {
    let p = policy();
    let outrun = Observation {
        sent: 3,
        ..Observation::default()
    };
    let mut states = [HealthState::new(false), HealthState::new(false)];
    for _ in 0..30 {
        run_fleet(
            &p,
            &mut states,
            &[serving(4, 200.0, 1), serving(4, 200.0, 1)],
        );
    }
    // Silent 1, 2, 3 s (not past 3 bars of 1 s), then 4 s with 12
    // unanswered: out, 3 intervals before the count of slow ones would.
    for _ in 0..SILENT_BARS {
        run_fleet(&p, &mut states, &[serving(4, 200.0, 1), outrun]);
        assert_eq!(states[1].ejected(), None);
    }
    run_fleet(&p, &mut states, &[serving(4, 200.0, 1), outrun]);
    assert_eq!(states[1].ejected(), Some(Ejection::Outlier));
    assert_eq!(states[0].ejected(), None);
}

/// A healthy backend that loses a few hedge races in a row (fewer than
/// [`SILENT_REQUESTS`] unanswered), then answers: never ejected, however
/// often that repeats.
#[test]
fn a_backend_losing_a_few_races_in_a_row_stays_in() {
    let p = policy();
    let lost = Observation {
        sent: 1,
        ..Observation::default()
    };
    let mut states = [HealthState::new(false), HealthState::new(false)];
    let cycle = SILENT_REQUESTS as usize + 1;
    for round in 0..600 {
        // One short of the count lost, a race an interval, then an answer.
        let b = match round % cycle {
            0 => serving(1, 200.0, 0),
            _ if round < 30 => serving(1, 200.0, 0),
            n if n < SILENT_REQUESTS as usize => lost,
            _ => serving(1, 200.0, 0),
        };
        run_fleet(&p, &mut states, &[serving(4, 200.0, 1), b]);
        assert_eq!(states[1].ejected(), None, "round {round}");
    }
}
