//! Half-open: how many probes go, when the round closes or reopens, and
//! the round's maximum wait.

use super::*;

/// A breaker with `policy` tripped at `t0`, and the instant its open
/// duration (5 s) ends.
fn half_open(policy: BreakerConfigBuilder, t0: Instant) -> (CircuitState, Instant) {
    let mut s = breaker(policy.consecutive_failures(1));
    trip(&mut s, t0);
    (s, t0 + secs(5))
}

#[test]
fn exactly_half_open_permits_probes_are_admitted() {
    let t0 = Instant::now();
    let (mut s, now) = half_open(base().half_open_permits(4), t0);
    let (_, t) = s.try_acquire(now).unwrap();
    assert_eq!(t.map(|t| t.reason), Some(Reason::OpenElapsed));
    for _ in 0..3 {
        let (_, t) = s.try_acquire(now).expect("4 permits");
        assert_eq!(t, None);
    }
    let refused = s.try_acquire(now).unwrap_err();
    assert_eq!(refused.retry_after, secs(300), "the rest of the round");
    assert_eq!(refused.transition, None);
}

#[test]
fn every_probe_reported_below_both_thresholds_closes_with_an_empty_window() {
    let t0 = Instant::now();
    let (mut s, now) = half_open(base().half_open_permits(3), t0);
    let probes: Vec<_> = (0..3).map(|_| s.try_acquire(now).unwrap().0).collect();
    assert_eq!(
        s.record(probes[0], Outcome::Success, Some(ms(1)), now),
        None
    );
    assert_eq!(s.record(probes[1], Outcome::Success, None, now), None);
    assert_eq!(s.state(now), BreakerState::HalfOpen, "2 of 3 reported");
    let t = s
        .record(probes[2], Outcome::Success, Some(ms(1)), now)
        .unwrap();
    assert_eq!(
        (t.from, t.to, t.reason),
        (
            BreakerState::HalfOpen,
            BreakerState::Closed,
            Reason::ProbesSucceeded
        )
    );
    let m = s.stats(now);
    assert_eq!((m.calls, m.failures, m.consecutive_failures), (0, 0, 0));
}

#[test]
fn failed_probes_reaching_the_threshold_share_reopen_before_the_round_ends() {
    let t0 = Instant::now();
    let (mut s, now) = half_open(base().half_open_permits(4), t0);
    let probes: Vec<_> = (0..4).map(|_| s.try_acquire(now).unwrap().0).collect();
    assert_eq!(
        s.record(probes[0], Outcome::Failure, None, now),
        None,
        "1 of 4"
    );
    let t = s.record(probes[1], Outcome::Overload, None, now).unwrap();
    assert_eq!((t.to, t.reason), (BreakerState::Open, Reason::ProbesFailed));
    // The round is over: the probes still out are stale.
    assert_eq!(s.record(probes[2], Outcome::Success, None, now), None);
}

#[test]
fn slow_probes_reaching_the_slow_call_threshold_reopen() {
    let t0 = Instant::now();
    let p = base()
        .half_open_permits(2)
        .slow_call_duration(secs(1))
        .slow_call_rate_threshold(0.5);
    let (mut s, now) = half_open(p, t0);
    let (a, _) = s.try_acquire(now).unwrap();
    let (_b, _) = s.try_acquire(now).unwrap();
    let t = s.record(a, Outcome::Success, Some(secs(1)), now).unwrap();
    assert_eq!((t.to, t.reason), (BreakerState::Open, Reason::ProbesFailed));
}

#[test]
fn slow_probes_below_the_threshold_share_do_not_reopen() {
    let t0 = Instant::now();
    let p = base()
        .half_open_permits(4)
        .slow_call_duration(secs(1))
        .slow_call_rate_threshold(0.5);
    let (mut s, now) = half_open(p, t0);
    let probes: Vec<_> = (0..4).map(|_| s.try_acquire(now).unwrap().0).collect();
    let slow = Some(secs(1));
    assert_eq!(
        s.record(probes[0], Outcome::Success, slow, now),
        None,
        "1 slow of 4 permits: 25% < 50%"
    );
    let t = s.record(probes[1], Outcome::Success, slow, now).unwrap();
    assert_eq!((t.to, t.reason), (BreakerState::Open, Reason::ProbesFailed));
}

#[test]
fn an_ignored_probe_gives_its_permit_back_and_never_closes() {
    let t0 = Instant::now();
    let (mut s, now) = half_open(base().half_open_permits(1), t0);
    for _ in 0..3 {
        let (probe, _) = s.try_acquire(now).expect("the permit came back");
        assert_eq!(s.record(probe, Outcome::Ignored, None, now), None);
        assert_eq!(s.state(now), BreakerState::HalfOpen);
    }
    let (probe, _) = s.try_acquire(now).unwrap();
    assert!(s.try_acquire(now).is_err(), "one permit");
    let t = s.record(probe, Outcome::Success, None, now).unwrap();
    assert_eq!(t.to, BreakerState::Closed);
}

#[test]
fn an_unfinished_round_reopens_on_the_first_admission_past_its_max_wait() {
    let t0 = Instant::now();
    let p = base().half_open_permits(2).half_open_max_wait(secs(10));
    let (mut s, since) = half_open(p, t0);
    let (_a, _) = s.try_acquire(since).unwrap();
    let (b, _) = s.try_acquire(since).unwrap();
    s.release(b);
    let just_before = since + secs(10) - Duration::from_nanos(1);
    assert_eq!(s.state(just_before), BreakerState::HalfOpen);
    let deadline = since + secs(10);
    assert_eq!(
        s.state(deadline),
        BreakerState::Open,
        "reads open past the deadline"
    );
    let refused = s.try_acquire(deadline).unwrap_err();
    let t = refused.transition.expect("the asking reopens it");
    assert_eq!(
        (t.from, t.to, t.reason),
        (
            BreakerState::HalfOpen,
            BreakerState::Open,
            Reason::HalfOpenTimeout
        )
    );
    assert_eq!(
        refused.retry_after,
        secs(5),
        "a timed-out round proved nothing: the same 5 s, not doubled"
    );
    assert_eq!(s.open_until(), Some(deadline + secs(5)));
    assert_eq!(s.stats(deadline).reopened, 0);
}

#[test]
fn a_late_record_reopens_an_unfinished_round() {
    let t0 = Instant::now();
    let p = base().half_open_permits(2).half_open_max_wait(secs(10));
    let (mut s, since) = half_open(p, t0);
    let (a, _) = s.try_acquire(since).unwrap();
    let (b, _) = s.try_acquire(since).unwrap();
    assert_eq!(s.record(a, Outcome::Success, None, since + secs(1)), None);
    let late = since + secs(10);
    let t = s.record(b, Outcome::Success, None, late).expect("too late");
    assert_eq!(
        (t.to, t.reason),
        (BreakerState::Open, Reason::HalfOpenTimeout)
    );
    assert_eq!(s.state(late), BreakerState::Open);
}
