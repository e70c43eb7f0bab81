//! What the shared [`Breaker`](crate::breaker::Breaker) reads from the
//! state to publish for its lock-free paths: the epoch and the tickets
//! that carry it, whether calls are admitted freely, whether a success
//! would change nothing, whether every probe is out and until when.

use super::*;

#[test]
fn the_epoch_moves_on_every_transition_and_tickets_carry_it() {
    let t0 = Instant::now();
    let mut s = breaker(base().consecutive_failures(1));
    let (ticket, _) = s.try_acquire(t0).unwrap();
    assert_eq!((s.epoch(), ticket.epoch()), (0, 0));
    assert!(s.record(ticket, Outcome::Failure, None, t0).is_some());
    assert_eq!(s.epoch(), 1, "closed → open");
    let (probe, _) = s.try_acquire(t0 + secs(5)).unwrap();
    assert_eq!((s.epoch(), probe.epoch()), (2, 2), "open → half-open");
    s.set_mode(Mode::MetricsOnly, t0 + secs(5));
    assert_eq!(s.epoch(), 3, "a change of mode");
    assert_eq!(CircuitState::ticket_for(3).epoch(), 3);
}

#[test]
fn mode_and_policy_read_back() {
    let now = Instant::now();
    let policy = base().window(7).build().unwrap();
    let mut s = CircuitState::with_seed(policy.clone(), 1);
    assert_eq!(s.policy(), &policy);
    for mode in [
        Mode::MetricsOnly,
        Mode::Disabled,
        Mode::ForcedOpen,
        Mode::Normal,
    ] {
        s.set_mode(mode, now);
        assert_eq!(s.mode(), mode);
    }
}

#[test]
fn calls_are_admitted_freely_only_closed_or_in_a_free_mode() {
    let t0 = Instant::now();
    let mut s = breaker(base().consecutive_failures(1));
    assert!(s.admits_freely(), "closed");
    trip(&mut s, t0);
    assert!(!s.admits_freely(), "open");
    s.try_acquire(t0 + secs(5)).unwrap();
    assert!(!s.admits_freely(), "half-open");
    for (mode, free) in [
        (Mode::ForcedOpen, false),
        (Mode::Disabled, true),
        (Mode::MetricsOnly, true),
        (Mode::Normal, true),
    ] {
        s.set_mode(mode, t0);
        assert_eq!(s.admits_freely(), free, "{mode:?}");
    }
}

#[test]
fn saturated_only_admitting_freely_with_a_full_window_of_fast_successes() {
    let now = Instant::now();
    let mut s = breaker(base());
    assert!(!s.saturated(), "an empty window");
    for _ in 0..9 {
        timed(&mut s, Outcome::Success, Some(ms(1)), now);
    }
    assert!(!s.saturated(), "9 calls in a window of 10");
    timed(&mut s, Outcome::Success, Some(ms(1)), now);
    assert!(s.saturated());
    timed(&mut s, Outcome::Failure, Some(ms(1)), now);
    assert!(!s.saturated(), "a failure in the window");
    s.set_mode(Mode::Disabled, now);
    assert!(s.saturated(), "disabled: a record changes nothing");
    s.set_mode(Mode::ForcedOpen, now);
    assert!(!s.saturated(), "forced open");
    s.set_mode(Mode::MetricsOnly, now);
    assert!(!s.saturated(), "metrics only, an empty window");
    for _ in 0..10 {
        timed(&mut s, Outcome::Success, None, now);
    }
    assert!(s.saturated(), "metrics only, a full window of successes");
}

#[test]
fn probes_are_out_when_half_open_with_every_permit_issued() {
    let t0 = Instant::now();
    let mut s = breaker(base().consecutive_failures(1).half_open_max_wait(secs(30)));
    assert!(!s.probes_out(), "closed");
    assert_eq!(s.half_open_deadline(), None, "closed");
    trip(&mut s, t0);
    assert!(!s.probes_out(), "open");
    assert_eq!(s.half_open_deadline(), None, "open");
    let now = t0 + secs(5);
    let (first, _) = s.try_acquire(now).unwrap();
    assert!(!s.probes_out(), "1 of 2 probes out");
    assert_eq!(s.half_open_deadline(), Some(now + secs(30)));
    let (_second, _) = s.try_acquire(now).unwrap();
    assert!(s.probes_out(), "2 of 2 probes out");
    s.release(first);
    assert!(!s.probes_out(), "one came back");
}
