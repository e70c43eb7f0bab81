//! The shared breaker's crate-private paths: the lock-free ones read the
//! clock only when the breaker does not admit freely, waiters are woken
//! only by a change that may admit them, and what the balancer and the
//! backpressure service read back (forced open, the fleet's gauge, the
//! wait of a stale reservation, whether a permit is current).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Wake, Waker};
use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::breaker::BreakerConfigBuilder;

const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Trips after two failures, opens for 10 s, one probe; slow calls take
/// 10 s, a round 300 s at most, forced open hints 120 s (the defaults).
fn base() -> BreakerConfigBuilder {
    BreakerConfig::builder()
        .window(4)
        .minimum_calls(2)
        .failure_rate_threshold(0.5)
        .open_duration(secs(10))
        .half_open_permits(1)
        .jitter(false)
}

fn breaker() -> Breaker {
    Breaker::new(base().build().unwrap())
}

/// The clock of a path that must not read it.
fn no_clock() -> Instant {
    panic!("read the clock while the breaker admits freely")
}

/// Two failures at `at`: open until `at + 10 s`.
fn trip(breaker: &Breaker, at: Instant) {
    for _ in 0..2 {
        breaker
            .try_acquire_at(at)
            .unwrap()
            .record_at(Outcome::Failure, at);
    }
    assert_eq!(breaker.state_at(at), BreakerState::Open);
}

/// A waker that counts its wakes.
#[derive(Default)]
struct Wakes(AtomicUsize);

impl Wake for Wakes {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl Wakes {
    fn registered(breaker: &Breaker) -> Arc<Self> {
        let wakes = Arc::new(Self::default());
        breaker.wake_on_change(&Waker::from(wakes.clone()));
        wakes
    }

    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

#[test]
fn admitting_freely_reads_no_clock_in_any_epoch_or_free_mode() {
    let t0 = Instant::now();
    let b = breaker();
    let check = |what: &str| {
        assert!(b.admits_with(no_clock), "{what}: admits");
        #[cfg(feature = "balance")]
        assert!(b.admits_freely(), "{what}: admits freely");
        let ticket = b.try_ticket_with(no_clock).unwrap();
        b.record_ticket_with(ticket, Outcome::Ignored, None, no_clock);
    };
    check("new (epoch 0)");
    trip(&b, t0);
    b.set_mode(Mode::Normal);
    assert_eq!(b.lock().epoch(), 2);
    check("closed again (epoch 2)");
    b.set_mode(Mode::MetricsOnly);
    check("metrics only");
    b.set_mode(Mode::Disabled);
    check("disabled");
}

#[test]
fn a_fast_success_into_a_saturated_window_reads_no_clock() {
    let t0 = Instant::now();
    let b = breaker();
    for _ in 0..4 {
        b.try_acquire_at(t0)
            .unwrap()
            .record_at(Outcome::Success, t0);
    }
    assert!(b.inner.saturated.load(Ordering::Acquire));
    for elapsed in [Some(Duration::ZERO), Some(secs(9)), None] {
        let ticket = b.try_ticket_with(no_clock).unwrap();
        b.record_ticket_with(ticket, Outcome::Success, elapsed, no_clock);
    }
    assert_eq!(b.stats_at(t0).calls, 4, "nothing recorded");
}

#[test]
fn an_outcome_that_changes_nothing_wakes_nobody() {
    let t0 = Instant::now();
    let b = breaker();
    let wakes = Wakes::registered(&b);
    for outcome in [Outcome::Success, Outcome::Success, Outcome::Failure] {
        b.try_acquire_at(t0).unwrap().record_at(outcome, t0);
    }
    assert_eq!(wakes.count(), 0, "no transition, no permit given back");
    b.try_acquire_at(t0)
        .unwrap()
        .record_at(Outcome::Failure, t0);
    assert_eq!(b.state_at(t0), BreakerState::Open, "2 failures of 4");
    assert_eq!(wakes.count(), 1, "woken by the trip");
}

#[test]
fn a_half_open_probe_ignored_gives_its_permit_back_and_wakes_the_waiters() {
    let t0 = Instant::now();
    let b = breaker();
    trip(&b, t0);
    let t1 = t0 + secs(10);
    let probe = b.try_acquire_at(t1).unwrap();
    assert_eq!(b.state_at(t1), BreakerState::HalfOpen);
    assert!(!b.admits_at(t1), "its only probe is out");
    let wakes = Wakes::registered(&b);
    probe.record_at(Outcome::Ignored, t1);
    assert_eq!(wakes.count(), 1);
    assert!(b.admits_at(t1), "the probe permit came back");
    assert!(b.try_acquire_at(t1).is_ok());
}

#[cfg(feature = "balance")]
#[test]
fn only_a_breaker_forced_open_by_hand_is_forced_open() {
    let t0 = Instant::now();
    let b = breaker();
    assert!(!b.is_forced_open(), "closed");
    trip(&b, t0);
    assert!(!b.is_forced_open(), "open by its calls");
    assert!(!b.admits_freely());
    b.set_mode(Mode::ForcedOpen);
    assert!(b.is_forced_open());
    b.set_mode(Mode::Normal);
    assert!(!b.is_forced_open(), "closed again");
}

#[cfg(feature = "balance")]
#[test]
fn the_fleet_gauge_counts_a_breaker_once_while_it_is_not_closed() {
    let t0 = Instant::now();
    let gauge = Arc::new(AtomicUsize::new(0));
    let b = Breaker::with_gauge(base().build().unwrap(), gauge.clone(), None);
    let count = || gauge.load(Ordering::Relaxed);
    trip(&b, t0);
    assert_eq!(count(), 1, "open");
    let t1 = t0 + secs(10);
    let probe = b.try_acquire_at(t1).unwrap();
    assert_eq!((b.state_at(t1), count()), (BreakerState::HalfOpen, 1));
    probe.record_at(Outcome::Failure, t1);
    assert_eq!((b.state_at(t1), count()), (BreakerState::Open, 1));
    b.set_mode(Mode::ForcedOpen);
    assert_eq!(count(), 1, "forced open");
    b.set_mode(Mode::Normal);
    assert_eq!(count(), 0, "closed");
    trip(&b, t0);
    assert_eq!(count(), 1);
    drop(b);
    assert_eq!(count(), 0, "a breaker dropped open leaves the gauge");
}

#[test]
fn a_stale_reservation_waits_for_what_would_admit_it() {
    let t0 = Instant::now();
    let b = breaker();
    let retry_after = |at: Instant| b.try_acquire_freely(at).unwrap_err().retry_after;
    trip(&b, t0);
    assert_eq!(
        retry_after(t0 + secs(4)),
        secs(6),
        "the rest of the open time"
    );
    let t1 = t0 + secs(10);
    let probe = b.try_acquire_at(t1).unwrap();
    assert_eq!(
        retry_after(t1 + secs(1)),
        secs(299),
        "every probe out: the rest of the round's 300 s"
    );
    drop(probe);
    assert_eq!(retry_after(t1), Duration::ZERO, "a probe permit left");
    b.set_mode(Mode::ForcedOpen);
    assert_eq!(
        retry_after(t1),
        secs(120),
        "forced open: the maximum open duration"
    );
    assert_eq!(b.stats().rejected, 4);
    b.set_mode(Mode::Normal);
    assert!(b.try_acquire_freely(t1).is_ok());
}

#[test]
fn a_permit_is_current_until_the_next_transition() {
    let t0 = Instant::now();
    let b = breaker();
    let first = b.try_acquire_at(t0).unwrap();
    assert!(first.is_current_at(t0), "closed, epoch 0");
    drop(first);
    trip(&b, t0);
    b.set_mode(Mode::Normal);
    let again = b.try_acquire_at(t0).unwrap();
    assert!(again.is_current_at(t0), "closed, epoch 2");
    trip(&b, t0);
    assert!(!again.is_current_at(t0), "the breaker opened since");
}

#[test]
fn a_restarted_permit_times_the_call_from_the_restart() {
    let t0 = Instant::now();
    let b = breaker();
    let mut permit = b.try_acquire_at(t0).unwrap();
    permit.restart(t0 + secs(60));
    assert_eq!(permit.admitted(), t0 + secs(60));
    permit.record_at(Outcome::Success, t0 + secs(61));
    let m = b.stats_at(t0 + secs(61));
    assert_eq!((m.timed_calls, m.slow_calls), (1, 0), "1 s, not 61 s");
}
