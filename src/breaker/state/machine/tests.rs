use std::time::Duration;

use proptest::prelude::*;
use tokio::time::Instant;

use super::*;
use crate::breaker::BreakerConfigBuilder;

mod closed;
mod half_open;
mod modes;
mod open;
mod published;

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The tests' base policy (no jitter, so durations are exact), for each
/// test to change the knob it checks.
fn base() -> BreakerConfigBuilder {
    BreakerConfig::builder()
        .window(10)
        .minimum_calls(5)
        .failure_rate_threshold(0.5)
        .open_duration(secs(5))
        .jitter(false)
        .half_open_permits(2)
}

/// A closed breaker with `policy` and a fixed jitter seed.
fn breaker(policy: BreakerConfigBuilder) -> CircuitState {
    CircuitState::with_seed(policy.build().unwrap(), 7)
}

/// One call admitted and recorded at `now`, taking `elapsed` (`None`: not
/// timed); the transition its record caused.
fn timed(
    s: &mut CircuitState,
    outcome: Outcome,
    elapsed: Option<Duration>,
    now: Instant,
) -> Option<Transition> {
    let (ticket, _) = s.try_acquire(now).expect("admitted");
    s.record(ticket, outcome, elapsed, now)
}

/// Trips `s` (closed, normal mode) with consecutive failures at `now`.
fn trip(s: &mut CircuitState, now: Instant) {
    for _ in 0..10_000 {
        if call(s, Outcome::Failure, now).is_some() {
            assert_eq!(s.state(now), BreakerState::Open);
            return;
        }
    }
    panic!("never tripped");
}

fn policy() -> BreakerConfig {
    BreakerConfig::builder()
        .window(10)
        .minimum_calls(5)
        .failure_rate_threshold(0.5)
        .open_duration(Duration::from_secs(5))
        .jitter(false)
        .half_open_permits(2)
        .build()
        .unwrap()
}

fn call(s: &mut CircuitState, outcome: Outcome, now: Instant) -> Option<Transition> {
    let (ticket, _) = s.try_acquire(now).expect("admitted");
    s.record(ticket, outcome, None, now)
}

#[test]
fn does_not_trip_before_minimum_calls() {
    let now = Instant::now();
    let mut s = CircuitState::new(policy());
    for _ in 0..4 {
        assert_eq!(call(&mut s, Outcome::Failure, now), None);
    }
    assert_eq!(s.state(now), BreakerState::Closed);
    let t = call(&mut s, Outcome::Failure, now).unwrap();
    assert_eq!((t.from, t.to), (BreakerState::Closed, BreakerState::Open));
}

#[test]
fn trips_on_rate_not_count() {
    let now = Instant::now();
    let mut s = CircuitState::new(policy());
    // 4 failures in 10 calls: 40% < 50%.
    for i in 0..10 {
        let outcome = if i % 5 >= 3 {
            Outcome::Failure
        } else {
            Outcome::Success
        };
        assert_eq!(call(&mut s, outcome, now), None);
    }
    assert_eq!(s.state(now), BreakerState::Closed);
    // The window slides: one more failure replaces a success -> 5/10.
    assert!(call(&mut s, Outcome::Failure, now).is_some());
    assert_eq!(s.state(now), BreakerState::Open);
}

#[test]
fn ignored_outcomes_are_not_counted() {
    let now = Instant::now();
    let mut s = CircuitState::new(policy());
    for _ in 0..20 {
        call(&mut s, Outcome::Ignored, now);
    }
    for _ in 0..4 {
        call(&mut s, Outcome::Failure, now);
    }
    assert_eq!(
        s.state(now),
        BreakerState::Closed,
        "4 counted calls < minimum 5"
    );
}

fn tripped(now: Instant) -> CircuitState {
    let mut s = CircuitState::new(policy());
    for _ in 0..5 {
        call(&mut s, Outcome::Failure, now);
    }
    s
}

#[test]
fn open_fails_fast_until_duration_passes() {
    let now = Instant::now();
    let mut s = tripped(now);
    assert_eq!(
        s.try_acquire(now + Duration::from_secs(2))
            .unwrap_err()
            .retry_after,
        Duration::from_secs(3)
    );
    let (_, t) = s.try_acquire(now + Duration::from_secs(5)).unwrap();
    assert_eq!(t.unwrap().to, BreakerState::HalfOpen);
}

#[test]
fn half_open_limits_probes_and_closes_on_success() {
    let t0 = Instant::now();
    let mut s = tripped(t0);
    let now = t0 + Duration::from_secs(5);
    let (a, _) = s.try_acquire(now).unwrap();
    let (b, _) = s.try_acquire(now).unwrap();
    assert_eq!(
        s.try_acquire(now).unwrap_err().retry_after,
        Duration::from_secs(300),
        "only 2 permits: wait for the round's end"
    );
    assert_eq!(s.record(a, Outcome::Success, None, now), None);
    let t = s.record(b, Outcome::Success, None, now).unwrap();
    assert_eq!(t.to, BreakerState::Closed);
    // Closed with an empty window: 4 failures do not trip it again.
    for _ in 0..4 {
        assert_eq!(call(&mut s, Outcome::Failure, now), None);
    }
}

#[test]
fn half_open_reopens_as_soon_as_failures_reach_threshold() {
    let t0 = Instant::now();
    let mut s = tripped(t0);
    let now = t0 + Duration::from_secs(5);
    let (a, _) = s.try_acquire(now).unwrap();
    let (_b, _) = s.try_acquire(now).unwrap();
    let t = s.record(a, Outcome::Failure, None, now).unwrap();
    assert_eq!(
        t.to,
        BreakerState::Open,
        "1 of 2 probes failed: 50% >= threshold"
    );
    assert!(s.try_acquire(now + Duration::from_secs(1)).is_err());
}

#[test]
fn released_and_ignored_probes_give_their_permit_back() {
    let t0 = Instant::now();
    let mut s = tripped(t0);
    let now = t0 + Duration::from_secs(5);
    let (a, _) = s.try_acquire(now).unwrap();
    let (b, _) = s.try_acquire(now).unwrap();
    s.release(a);
    assert_eq!(s.record(b, Outcome::Ignored, None, now), None);
    // Both permits are back: two fresh probes are admitted.
    let (c, _) = s.try_acquire(now).unwrap();
    let (d, _) = s.try_acquire(now).unwrap();
    assert!(s.try_acquire(now).is_err());
    s.record(c, Outcome::Success, None, now);
    assert_eq!(
        s.record(d, Outcome::Success, None, now).unwrap().to,
        BreakerState::Closed
    );
}

#[test]
fn stale_outcomes_do_not_count() {
    let now = Instant::now();
    let mut s = CircuitState::new(policy());
    let (old, _) = s.try_acquire(now).unwrap();
    for _ in 0..5 {
        call(&mut s, Outcome::Failure, now);
    }
    let later = now + Duration::from_secs(5);
    let (probe, _) = s.try_acquire(later).unwrap();
    // The closed-era call ends now: it is not a probe.
    assert_eq!(s.record(old, Outcome::Success, None, later), None);
    assert_eq!(s.state(later), BreakerState::HalfOpen);
    s.record(probe, Outcome::Success, None, later);
    assert_eq!(
        s.state(later),
        BreakerState::HalfOpen,
        "one of two probes reported"
    );
}

#[derive(Debug, Clone)]
enum Op {
    Acquire,
    Record(usize, u8),
    Release(usize),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Acquire),
        3 => (any::<usize>(), 0u8..3).prop_map(|(i, o)| Op::Record(i, o)),
        1 => any::<usize>().prop_map(Op::Release),
        1 => (0u64..8_000).prop_map(Op::Advance),
    ]
}

proptest! {
    /// Under any interleaving: an open breaker never admits before its time,
    /// half-open never has more than `half_open_permits` calls out, and a
    /// breaker only opens from closed on a full-enough, failing-enough window.
    #[test]
    fn invariants_hold_under_any_interleaving(ops in proptest::collection::vec(op(), 1..200)) {
        let p = policy();
        let mut s = CircuitState::new(p.clone());
        let mut now = Instant::now();
        let mut out: Vec<Ticket> = Vec::new();
        for op in ops {
            let before = s.state(now);
            match op {
                Op::Acquire => match s.try_acquire(now) {
                    Ok((ticket, _)) => {
                        prop_assert_ne!(before, BreakerState::Open);
                        out.push(ticket);
                    }
                    Err(wait) => {
                        prop_assert_ne!(before, BreakerState::Closed);
                        if before == BreakerState::Open {
                            prop_assert_eq!(Some(now + wait.retry_after), s.open_until());
                        }
                    }
                },
                Op::Record(i, o) if !out.is_empty() => {
                    let ticket = out.swap_remove(i % out.len());
                    let outcome = [Outcome::Success, Outcome::Failure, Outcome::Ignored][o as usize];
                    if let Some(t) = s.record(ticket, outcome, None, now) {
                        prop_assert_eq!(t.from, before);
                        if t.from == BreakerState::Closed {
                            prop_assert_ne!(outcome, Outcome::Ignored);
                            prop_assert!(s.window.totals(now).calls >= p.minimum_calls as u64
                                || p.consecutive_failures.is_some());
                        }
                    }
                }
                Op::Release(i) if !out.is_empty() => {
                    let ticket = out.swap_remove(i % out.len());
                    s.release(ticket);
                }
                Op::Advance(ms) => now += Duration::from_millis(ms),
                _ => {}
            }
            if let State::HalfOpen { issued, successes, failures, .. } = s.state {
                prop_assert!(issued <= p.half_open_permits);
                prop_assert!(successes + failures <= issued);
            }
        }
    }
}
