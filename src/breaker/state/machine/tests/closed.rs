//! The closed state's knobs: window, minimum calls, thresholds, slow calls,
//! consecutive failures, and what overloads and ignored calls count for.

use super::*;

fn outcomes(s: &mut CircuitState, list: &[Outcome], now: Instant) -> Vec<Option<Transition>> {
    list.iter().map(|&o| call(s, o, now)).collect()
}

use Outcome::{Failure as F, Ignored as I, Overload as O, Success as S};

#[test]
fn the_count_window_holds_only_the_last_n_calls() {
    let now = Instant::now();
    let mut s = breaker(
        base()
            .window(4)
            .minimum_calls(4)
            .failure_rate_threshold(0.75),
    );
    // 2 of 4 failed, then two successes push both failures out.
    assert!(outcomes(&mut s, &[F, F, S, S, S, S], now)
        .iter()
        .all(Option::is_none));
    let m = s.stats(now);
    assert_eq!((m.calls, m.failures), (4, 0), "the last 4 calls only");
    // 3 of the last 4 failed: trips (over all 9 calls it would be 5/9).
    assert_eq!(outcomes(&mut s, &[F, F], now), [None, None]);
    let t = call(&mut s, F, now).expect("3 of the last 4 failed");
    assert_eq!(t.reason, Reason::FailureRate);
}

#[test]
fn minimum_calls_of_one_trips_on_the_first_failure() {
    let now = Instant::now();
    let mut s = breaker(base().minimum_calls(1));
    let t = call(&mut s, F, now).expect("1 of 1 failed, and 1 call is enough");
    assert_eq!((t.to, t.reason), (BreakerState::Open, Reason::FailureRate));
}

#[test]
fn the_failure_rate_trips_at_its_threshold_and_not_below() {
    let now = Instant::now();
    let p = || base().minimum_calls(10).failure_rate_threshold(0.3);
    let mut below = breaker(p());
    let calls = [S, S, S, S, S, S, S, S, F, F];
    assert!(outcomes(&mut below, &calls, now)
        .iter()
        .all(Option::is_none));
    assert_eq!(below.state(now), BreakerState::Closed, "20% < 30%");
    let mut at = breaker(p());
    let calls = [S, S, S, S, S, S, S, F, F];
    assert!(outcomes(&mut at, &calls, now).iter().all(Option::is_none));
    let t = call(&mut at, F, now).expect("3 of 10 failed: 30%");
    assert_eq!(t.reason, Reason::FailureRate);
}

#[test]
fn overloads_count_for_the_failure_rate() {
    let now = Instant::now();
    let mut s = breaker(base().window(4).minimum_calls(4));
    assert_eq!(outcomes(&mut s, &[O, S, O], now), [None, None, None]);
    let t = call(&mut s, S, now).expect("2 overloads in 4 calls: 50%");
    assert_eq!(t.reason, Reason::FailureRate);
}

#[test]
fn ignored_calls_count_for_nothing() {
    let now = Instant::now();
    let mut s = breaker(base().minimum_calls(1).consecutive_failures(1));
    for _ in 0..20 {
        assert_eq!(call(&mut s, I, now), None);
    }
    let m = s.stats(now);
    assert_eq!((m.calls, m.failures, m.timed_calls), (0, 0, 0));
    assert_eq!(s.state(now), BreakerState::Closed);
}

#[test]
fn slow_calls_trip_at_the_slow_call_rate_threshold() {
    let now = Instant::now();
    let p = base()
        .window(4)
        .minimum_calls(4)
        .failure_rate_threshold(1.0)
        .slow_call_duration(secs(1))
        .slow_call_rate_threshold(0.5);
    let mut s = breaker(p);
    // Just under the slow-call duration is not slow.
    for _ in 0..4 {
        assert_eq!(timed(&mut s, S, Some(secs(1) - ms(1)), now), None);
    }
    assert_eq!(s.stats(now).slow_calls, 0);
    assert_eq!(timed(&mut s, S, Some(secs(1)), now), None, "1 of 4 slow");
    let t = timed(&mut s, S, Some(secs(1)), now).expect("2 of 4 slow: 50%");
    assert_eq!((t.to, t.reason), (BreakerState::Open, Reason::SlowCallRate));
}

#[test]
fn the_slow_call_rate_is_over_timed_calls_only() {
    let now = Instant::now();
    let p = base()
        .window(8)
        .minimum_calls(4)
        .slow_call_duration(secs(1))
        .slow_call_rate_threshold(0.5);
    let mut s = breaker(p);
    for _ in 0..4 {
        assert_eq!(timed(&mut s, S, None, now), None, "a cold load, untimed");
    }
    assert_eq!(timed(&mut s, S, Some(secs(2)), now), None, "1 of 1 timed");
    assert_eq!(timed(&mut s, S, Some(ms(10)), now), None, "1 of 2 timed");
    assert_eq!(timed(&mut s, S, Some(ms(10)), now), None, "1 of 3 timed");
    // 2 slow of 4 timed calls (of 8 calls): 50%, over enough timed calls.
    let t = timed(&mut s, S, Some(secs(2)), now).expect("2 of 4 timed calls slow");
    assert_eq!(t.reason, Reason::SlowCallRate);
    let m = s.stats(now);
    assert_eq!((m.calls, m.timed_calls, m.slow_calls), (8, 4, 2));
}

#[test]
fn a_slow_call_rate_over_fewer_timed_calls_than_the_minimum_never_trips() {
    // The default policy (20 calls, 10 at least, every timed call slow):
    // a healthy backend taking a failed one's models answers cold loads
    // (untimed), and two of its warm requests lose hedge races (recorded
    // slow). 2 of 2 timed calls slow is no rate: it stays closed.
    let now = Instant::now();
    let mut s = breaker(BreakerConfig::builder().jitter(false));
    for _ in 0..18 {
        assert_eq!(timed(&mut s, S, None, now), None);
    }
    for _ in 0..2 {
        assert_eq!(
            timed(&mut s, S, Some(secs(10)), now),
            None,
            "2 of 2 timed slow"
        );
    }
    let m = s.stats(now);
    assert_eq!((m.calls, m.timed_calls, m.slow_calls), (20, 2, 2));
    assert_eq!(s.state(now), BreakerState::Closed);
    // Once the window holds 10 timed calls, all slow, it trips.
    for _ in 0..7 {
        assert_eq!(timed(&mut s, S, Some(secs(10)), now), None);
    }
    let t = timed(&mut s, S, Some(secs(10)), now).expect("10 of 10 timed calls slow");
    assert_eq!(t.reason, Reason::SlowCallRate);
}

#[test]
fn a_cold_load_is_never_slow() {
    let now = Instant::now();
    let p = base()
        .window(4)
        .minimum_calls(1)
        .slow_call_duration(ms(1))
        .slow_call_rate_threshold(0.25);
    let mut s = breaker(p);
    for _ in 0..10 {
        assert_eq!(timed(&mut s, S, None, now), None);
    }
    let m = s.stats(now);
    assert_eq!((m.timed_calls, m.slow_calls), (0, 0));
    assert_eq!(s.state(now), BreakerState::Closed);
}

#[test]
fn consecutive_failures_trip_before_minimum_calls() {
    let now = Instant::now();
    let mut s = breaker(base().window(20).minimum_calls(20).consecutive_failures(3));
    assert_eq!(outcomes(&mut s, &[F, F], now), [None, None]);
    let t = call(&mut s, F, now).expect("3 in a row");
    assert_eq!(
        (t.to, t.reason),
        (BreakerState::Open, Reason::ConsecutiveFailures)
    );
}

#[test]
fn an_overload_neither_counts_toward_nor_breaks_a_run() {
    let now = Instant::now();
    let mut s = breaker(base().window(20).minimum_calls(20).consecutive_failures(3));
    assert_eq!(
        outcomes(&mut s, &[F, F, O, O], now),
        [None, None, None, None]
    );
    assert_eq!(s.stats(now).consecutive_failures, 2);
    let t = call(&mut s, F, now).expect("the run of 3 goes on over overloads");
    assert_eq!(t.reason, Reason::ConsecutiveFailures);
}

#[test]
fn a_success_breaks_a_run() {
    let now = Instant::now();
    let mut s = breaker(base().window(20).minimum_calls(20).consecutive_failures(3));
    assert_eq!(
        outcomes(&mut s, &[F, F, S, F, F], now),
        [None, None, None, None, None]
    );
    assert_eq!(s.stats(now).consecutive_failures, 2);
    assert!(call(&mut s, F, now).is_some());
}

#[test]
fn a_time_window_forgets_failures_older_than_its_duration() {
    let t0 = Instant::now();
    let p = base().time_window(secs(10), 10).minimum_calls(10);
    let mut s = breaker(p);
    for _ in 0..6 {
        assert_eq!(call(&mut s, F, t0), None, "below the minimum");
    }
    // 11 s later the 6 failures have expired: 2 of 10 calls fail, not 8 of 16.
    let later = t0 + secs(11);
    for o in [F, F, S, S, S, S, S, S, S, S] {
        assert_eq!(call(&mut s, o, later), None);
    }
    let m = s.stats(later);
    assert_eq!((m.calls, m.failures), (10, 2));
}

#[test]
fn a_time_window_counts_every_call_of_its_duration_whatever_the_rate() {
    let t0 = Instant::now();
    let p = base().time_window(secs(10), 10).minimum_calls(100);
    let mut s = breaker(p);
    // A burst of 1 000 calls, one in ten failing, within 1 s: a count
    // window would keep only its last calls.
    for i in 0..1_000u64 {
        let o = if i % 10 == 0 { F } else { S };
        assert_eq!(call(&mut s, o, t0 + Duration::from_micros(i * 1_000)), None);
    }
    let m = s.stats(t0 + secs(1));
    assert_eq!((m.calls, m.failures), (1_000, 100));
    assert_eq!(m.failure_rate, 0.1);
    // Then 10 calls in 10 s, half failing: the rate is the same whether
    // the window saw 1 000 calls or 10.
    let quiet = t0 + secs(20);
    for i in 0..10u64 {
        let o = if i % 2 == 0 { F } else { S };
        let _ = call(&mut s, o, quiet + secs(i));
    }
    let m = s.stats(quiet + secs(9));
    assert_eq!((m.calls, m.failures), (10, 5));
    assert_eq!(
        s.state(quiet + secs(9)),
        BreakerState::Closed,
        "10 < 100 calls"
    );
}
