//! Modes set by hand, stale tickets, and the reason of every transition.

use super::*;

#[test]
fn forced_open_refuses_everything_until_the_mode_changes() {
    let now = Instant::now();
    let mut s = breaker(base());
    let t = s.set_mode(Mode::ForcedOpen, now).unwrap();
    assert_eq!(
        (t.from, t.to, t.reason),
        (BreakerState::Closed, BreakerState::Open, Reason::Manual)
    );
    for later in [now, now + secs(3600), now + secs(86_400 * 365)] {
        assert_eq!(s.state(later), BreakerState::Open);
        assert!(s.try_acquire(later).is_err());
    }
    assert_eq!(s.open_until(), None, "never lets probes through by itself");
}

#[test]
fn disabled_admits_everything_and_counts_nothing() {
    let now = Instant::now();
    let mut s = breaker(base().consecutive_failures(1));
    trip(&mut s, now);
    let t = s.set_mode(Mode::Disabled, now).unwrap();
    assert_eq!((t.from, t.to), (BreakerState::Open, BreakerState::Closed));
    for _ in 0..100 {
        assert_eq!(timed(&mut s, Outcome::Failure, Some(secs(60)), now), None);
    }
    let m = s.stats(now);
    assert_eq!(
        (
            m.calls,
            m.failures,
            m.timed_calls,
            m.slow_calls,
            m.consecutive_failures
        ),
        (0, 0, 0, 0, 0)
    );
    assert_eq!((m.state, m.mode), (BreakerState::Closed, Mode::Disabled));
}

#[test]
fn metrics_only_counts_but_never_trips() {
    let now = Instant::now();
    let mut s = breaker(base().consecutive_failures(1));
    assert_eq!(s.set_mode(Mode::MetricsOnly, now), None, "closed to closed");
    for _ in 0..100 {
        assert_eq!(call(&mut s, Outcome::Failure, now), None);
    }
    let m = s.stats(now);
    assert_eq!((m.calls, m.failures, m.failure_rate), (10, 10, 1.0));
    assert_eq!(m.consecutive_failures, 100);
    assert_eq!(s.state(now), BreakerState::Closed);
}

#[test]
fn normal_mode_starts_fresh_from_any_mode() {
    let now = Instant::now();
    let p = || base().consecutive_failures(1).half_open_permits(1);
    // From forced open.
    let mut s = breaker(p());
    s.set_mode(Mode::ForcedOpen, now);
    let t = s.set_mode(Mode::Normal, now).unwrap();
    assert_eq!(
        (t.from, t.to, t.reason),
        (BreakerState::Open, BreakerState::Closed, Reason::Manual)
    );
    assert!(s.try_acquire(now).is_ok());
    // From normal, reopened once: closed, backoff reset.
    let mut s = breaker(p());
    trip(&mut s, now);
    let probe_at = s.open_until().unwrap();
    let (probe, _) = s.try_acquire(probe_at).unwrap();
    s.record(probe, Outcome::Failure, None, probe_at);
    assert_eq!(s.stats(probe_at).reopened, 1);
    let t = s.set_mode(Mode::Normal, probe_at).unwrap();
    assert_eq!(t.to, BreakerState::Closed);
    let m = s.stats(probe_at);
    assert_eq!(
        (m.state, m.reopened, m.calls, m.consecutive_failures),
        (BreakerState::Closed, 0, 0, 0)
    );
    trip(&mut s, probe_at);
    assert_eq!(
        s.open_until(),
        Some(probe_at + secs(5)),
        "the base duration again"
    );
    // From metrics only: the window it filled is emptied.
    let mut s = breaker(base());
    s.set_mode(Mode::MetricsOnly, now);
    for _ in 0..4 {
        call(&mut s, Outcome::Failure, now);
    }
    assert_eq!(s.set_mode(Mode::Normal, now), None, "closed to closed");
    assert_eq!(s.stats(now).calls, 0);
    for _ in 0..4 {
        assert_eq!(
            call(&mut s, Outcome::Failure, now),
            None,
            "4 < minimum 5 again"
        );
    }
}

#[test]
fn tickets_from_before_a_mode_change_count_nothing() {
    let now = Instant::now();
    let mut s = breaker(base().minimum_calls(1));
    let (old, _) = s.try_acquire(now).unwrap();
    s.set_mode(Mode::Normal, now);
    assert_eq!(s.record(old, Outcome::Failure, None, now), None);
    assert_eq!(s.stats(now).calls, 0);
    assert_eq!(s.state(now), BreakerState::Closed);
}

#[test]
fn tickets_from_before_a_transition_count_nothing() {
    let t0 = Instant::now();
    let mut s = breaker(base().consecutive_failures(1).half_open_permits(1));
    let (closed_era, _) = s.try_acquire(t0).unwrap();
    trip(&mut s, t0);
    let now = t0 + secs(5);
    let (probe, _) = s.try_acquire(now).unwrap();
    // A failure admitted while closed does not fail the probe round.
    assert_eq!(s.record(closed_era, Outcome::Failure, None, now), None);
    assert_eq!(s.state(now), BreakerState::HalfOpen);
    assert_eq!(
        s.record(probe, Outcome::Success, None, now).unwrap().to,
        BreakerState::Closed
    );
    // Nor does a probe given back from the round before.
    s.release(probe);
    assert_eq!(s.stats(now).calls, 0);
}

#[test]
fn every_cause_names_its_reason() {
    let t0 = Instant::now();
    let reason = |t: Option<Transition>| t.expect("a transition").reason;
    let mut s = breaker(base().window(2).minimum_calls(2));
    call(&mut s, Outcome::Failure, t0);
    assert_eq!(
        reason(call(&mut s, Outcome::Success, t0)),
        Reason::FailureRate
    );

    let slow = base().minimum_calls(1).slow_call_duration(secs(1));
    let mut s = breaker(slow);
    assert_eq!(
        reason(timed(&mut s, Outcome::Success, Some(secs(1)), t0)),
        Reason::SlowCallRate
    );

    let mut s = breaker(base().consecutive_failures(2));
    call(&mut s, Outcome::Failure, t0);
    assert_eq!(
        reason(call(&mut s, Outcome::Failure, t0)),
        Reason::ConsecutiveFailures
    );

    let t1 = t0 + secs(5);
    let (a, t) = s.try_acquire(t1).unwrap();
    assert_eq!(reason(t), Reason::OpenElapsed);
    assert_eq!(
        reason(s.record(a, Outcome::Failure, None, t1)),
        Reason::ProbesFailed
    );

    let t2 = t1 + secs(10);
    let (a, _) = s.try_acquire(t2).unwrap();
    let (b, _) = s.try_acquire(t2).unwrap();
    s.record(a, Outcome::Success, None, t2);
    assert_eq!(
        reason(s.record(b, Outcome::Success, None, t2)),
        Reason::ProbesSucceeded
    );

    trip(&mut s, t2);
    let t3 = t2 + secs(5);
    let _ = s.try_acquire(t3).unwrap();
    let late = t3 + s.policy().half_open_max_wait();
    assert_eq!(
        reason(s.try_acquire(late).unwrap_err().transition),
        Reason::HalfOpenTimeout
    );

    assert_eq!(
        reason(s.set_mode(Mode::ForcedOpen, late + secs(1_000))),
        Reason::Manual
    );
}
