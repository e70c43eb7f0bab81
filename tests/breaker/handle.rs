//! The shared `Breaker` handle: manual modes, counters, the transition hook,
//! `admits`, and the lock-free record path, over paused time.

use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::time::{advance, Instant};
use tower_model_balance::breaker::{
    Breaker, BreakerConfig, BreakerConfigBuilder, BreakerState, Mode, Reason, Transition,
};
use tower_model_balance::classify::Outcome;

fn base() -> BreakerConfigBuilder {
    BreakerConfig::builder()
        .window(4)
        .minimum_calls(2)
        .failure_rate_threshold(0.5)
        .open_duration(Duration::from_secs(10))
        .half_open_permits(1)
        .jitter(false)
}

fn fail_twice(breaker: &Breaker) {
    for _ in 0..2 {
        breaker.try_acquire().unwrap().record(Outcome::Failure);
    }
    assert_eq!(breaker.state(), BreakerState::Open);
}

type Seen = Arc<Mutex<Vec<(BreakerState, BreakerState, Reason)>>>;

/// A breaker whose hook logs every transition.
fn logged(policy: BreakerConfigBuilder) -> (Breaker, Seen) {
    let seen = Seen::default();
    let log = seen.clone();
    let hook = move |t: &Transition| log.lock().unwrap().push((t.from, t.to, t.reason));
    (Breaker::with_hook(policy.build().unwrap(), hook), seen)
}

#[tokio::test(start_paused = true)]
async fn force_open_refuses_every_call_and_is_not_a_trip() {
    let breaker = Breaker::new(base().build().unwrap());
    breaker.set_mode(Mode::ForcedOpen);
    assert_eq!(
        (breaker.state(), breaker.mode()),
        (BreakerState::Open, Mode::ForcedOpen)
    );
    for _ in 0..3 {
        assert!(breaker.try_acquire().is_err());
        advance(Duration::from_secs(3600)).await;
        assert!(!breaker.admits());
    }
    assert_eq!((breaker.stats().trips, breaker.stats().rejected), (0, 3));
}

#[tokio::test(start_paused = true)]
async fn force_closed_closes_at_once_and_runs_by_the_policy_again() {
    let breaker = Breaker::new(base().build().unwrap());
    fail_twice(&breaker);
    breaker.set_mode(Mode::Normal);
    assert_eq!(
        (breaker.state(), breaker.mode()),
        (BreakerState::Closed, Mode::Normal)
    );
    assert!(breaker.admits());
    assert_eq!(breaker.stats().calls, 0, "an empty window");
    fail_twice(&breaker);
    assert_eq!(breaker.stats().trips, 2);
}

#[tokio::test(start_paused = true)]
async fn disable_admits_every_call_and_counts_nothing() {
    let breaker = Breaker::new(base().build().unwrap());
    fail_twice(&breaker);
    breaker.set_mode(Mode::Disabled);
    for _ in 0..20 {
        breaker
            .try_acquire()
            .expect("disabled admits")
            .record(Outcome::Failure);
    }
    let m = breaker.stats();
    assert_eq!(
        (m.calls, m.failures, m.state, m.mode),
        (0, 0, BreakerState::Closed, Mode::Disabled)
    );
    assert_eq!(breaker.stats().trips, 1, "only the trip before");
}

#[tokio::test(start_paused = true)]
async fn metrics_only_counts_outcomes_and_never_trips() {
    let breaker = Breaker::new(base().consecutive_failures(1).build().unwrap());
    breaker.set_mode(Mode::MetricsOnly);
    for _ in 0..20 {
        breaker
            .try_acquire()
            .expect("metrics only admits")
            .record(Outcome::Failure);
    }
    let m = breaker.stats();
    assert_eq!((m.calls, m.failures, m.failure_rate), (4, 4, 1.0));
    assert_eq!((m.state, m.mode), (BreakerState::Closed, Mode::MetricsOnly));
    assert_eq!(breaker.stats().trips, 0);
}

#[tokio::test(start_paused = true)]
async fn reset_zeroes_the_trip_transition_and_rejection_counts() {
    let breaker = Breaker::new(base().build().unwrap());
    fail_twice(&breaker);
    assert!(breaker.try_acquire().is_err());
    assert!(breaker.try_acquire().is_err());
    breaker.set_mode(Mode::MetricsOnly);
    assert_eq!(
        (breaker.stats().trips, breaker.stats().rejected),
        (1, 2),
        "modes keep the counts"
    );
    assert_eq!(breaker.stats().transitions.to_open, 1);
    breaker.reset();
    assert_eq!((breaker.stats().trips, breaker.stats().rejected), (0, 0));
    assert_eq!(breaker.stats().transitions, Default::default());
    assert_eq!(
        (breaker.state(), breaker.mode()),
        (BreakerState::Closed, Mode::Normal)
    );
}

#[tokio::test(start_paused = true)]
async fn rejected_counts_refusals_open_and_half_open() {
    let breaker = Breaker::new(base().build().unwrap());
    fail_twice(&breaker);
    assert_eq!(breaker.stats().rejected, 0);
    let err = breaker.try_acquire().unwrap_err();
    assert_eq!(err.retry_after, Duration::from_secs(10));
    advance(Duration::from_secs(10)).await;
    let _probe = breaker.try_acquire().expect("the one probe");
    assert!(breaker.try_acquire().is_err(), "the probe is out");
    assert_eq!(breaker.stats().rejected, 2);
}

#[tokio::test(start_paused = true)]
async fn the_hook_sees_each_transition_once_with_its_reason() {
    use BreakerState::{Closed, HalfOpen, Open};
    let (breaker, seen) = logged(base());
    fail_twice(&breaker);
    advance(Duration::from_secs(10)).await;
    breaker.try_acquire().unwrap().record(Outcome::Failure);
    assert!(breaker.try_acquire().is_err(), "reopened for 20 s");
    advance(Duration::from_secs(20)).await;
    breaker.try_acquire().unwrap().record(Outcome::Success);
    breaker.set_mode(Mode::ForcedOpen);
    breaker.set_mode(Mode::ForcedOpen);
    breaker.set_mode(Mode::Normal);
    let want = [
        (Closed, Open, Reason::FailureRate),
        (Open, HalfOpen, Reason::OpenElapsed),
        (HalfOpen, Open, Reason::ProbesFailed),
        (Open, HalfOpen, Reason::OpenElapsed),
        (HalfOpen, Closed, Reason::ProbesSucceeded),
        (Closed, Open, Reason::Manual),
        (Open, Closed, Reason::Manual),
    ];
    assert_eq!(*seen.lock().unwrap(), want);
    assert_eq!(
        breaker.stats().trips,
        2,
        "two trips; forcing open is not one"
    );
    let counts = breaker.stats().transitions;
    assert_eq!(
        (counts.to_open, counts.to_half_open, counts.to_closed),
        (3, 2, 2),
        "every transition the hook saw, by the state entered"
    );
}

#[tokio::test(start_paused = true)]
async fn the_hook_sees_a_half_open_round_time_out() {
    let (breaker, seen) = logged(base().half_open_max_wait(Duration::from_secs(5)));
    fail_twice(&breaker);
    advance(Duration::from_secs(10)).await;
    let late = breaker.try_acquire().unwrap();
    advance(Duration::from_secs(5)).await;
    late.record(Outcome::Success);
    let last = *seen.lock().unwrap().last().unwrap();
    assert_eq!(
        last,
        (
            BreakerState::HalfOpen,
            BreakerState::Open,
            Reason::HalfOpenTimeout
        )
    );
    assert_eq!(breaker.stats().trips, 1, "a round timing out is not a trip");
}

#[test]
fn the_hook_may_read_the_breaker_without_deadlock() {
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let cell: Arc<OnceLock<Breaker>> = Arc::default();
            let reads = Arc::new(Mutex::new(Vec::new()));
            let (handle, log) = (cell.clone(), reads.clone());
            let hook = move |t: &Transition| {
                let breaker = handle.get().expect("set before any call");
                log.lock()
                    .unwrap()
                    .push((t.to, breaker.state(), breaker.stats().calls));
            };
            let breaker = Breaker::with_hook(base().build().unwrap(), hook);
            cell.set(breaker.clone()).unwrap();
            fail_twice(&breaker);
            breaker.set_mode(Mode::Normal);
            let reads = reads.lock().unwrap().clone();
            let want = [
                (BreakerState::Open, BreakerState::Open, 2),
                (BreakerState::Closed, BreakerState::Closed, 0),
            ];
            assert_eq!(reads, want, "the hook reads the state it reports");
        });
        done.send(()).unwrap();
    });
    // A failsafe only: the test is decided by the hook's reads above.
    finished
        .recv_timeout(Duration::from_secs(30))
        .expect("the hook deadlocked on the breaker's lock (or panicked)");
}

#[tokio::test(start_paused = true)]
async fn admits_is_false_while_every_probe_is_out_until_the_round_max_wait() {
    let policy = base()
        .half_open_permits(2)
        .half_open_max_wait(Duration::from_secs(30));
    let breaker = Breaker::new(policy.build().unwrap());
    fail_twice(&breaker);
    assert!(!breaker.admits(), "open");
    advance(Duration::from_secs(10)).await;
    assert!(breaker.admits(), "its open time is up");
    let a = breaker.try_acquire().unwrap();
    assert!(breaker.admits(), "one probe left");
    let _b = breaker.try_acquire().unwrap();
    assert!(!breaker.admits(), "every probe out");
    advance(Duration::from_secs(30) - Duration::from_millis(1)).await;
    assert!(!breaker.admits(), "the round is not over");
    advance(Duration::from_millis(1)).await;
    assert!(breaker.admits(), "the round outlasted its max wait");
    assert_eq!(
        breaker.state(),
        BreakerState::Open,
        "reads open past the deadline"
    );
    // The next admission reopens it (for the same 10 s: a timed-out round
    // proved nothing), and admits turns false.
    assert_eq!(
        breaker.try_acquire().unwrap_err().retry_after,
        Duration::from_secs(10)
    );
    assert!(!breaker.admits());
    drop(a);
}

#[tokio::test(start_paused = true)]
async fn a_slow_success_into_a_saturated_window_still_trips() {
    let policy = base()
        .window(4)
        .minimum_calls(4)
        .slow_call_duration(Duration::from_secs(1))
        .slow_call_rate_threshold(0.25);
    let (breaker, seen) = logged(policy);
    // A window full of fast successes: the lock-free path records the next
    // fast success as nothing.
    for _ in 0..8 {
        breaker.try_acquire().unwrap().record(Outcome::Success);
    }
    let slow = breaker.try_acquire().unwrap();
    advance(Duration::from_secs(1)).await;
    slow.record(Outcome::Success);
    assert_eq!(
        breaker.state(),
        BreakerState::Open,
        "1 slow of 4 timed calls: 25%"
    );
    let want = (
        BreakerState::Closed,
        BreakerState::Open,
        Reason::SlowCallRate,
    );
    assert_eq!(*seen.lock().unwrap(), [want]);
}

#[tokio::test(start_paused = true)]
async fn a_cold_success_into_a_saturated_window_is_not_slow() {
    let policy = base()
        .window(4)
        .minimum_calls(4)
        .slow_call_duration(Duration::from_secs(1))
        .slow_call_rate_threshold(0.25);
    let breaker = Breaker::new(policy.build().unwrap());
    for _ in 0..4 {
        breaker.try_acquire().unwrap().record(Outcome::Success);
    }
    let cold = breaker.try_acquire().unwrap();
    advance(Duration::from_secs(60)).await;
    cold.record_call_at(Outcome::Success, None, Instant::now());
    assert_eq!(breaker.state(), BreakerState::Closed);
    assert_eq!(breaker.stats().slow_calls, 0);
}

#[tokio::test(start_paused = true)]
async fn the_policy_reads_back() {
    let policy = base().window(7).slow_call_duration(Duration::from_secs(3));
    let policy = policy.build().unwrap();
    assert_eq!(Breaker::new(policy.clone()).config(), policy);
}

#[tokio::test(start_paused = true)]
async fn debug_shows_the_state_and_the_counts() {
    let (breaker, _) = logged(base());
    fail_twice(&breaker);
    assert!(breaker.try_acquire().is_err());
    let shown = format!("{breaker:?}");
    for field in ["state: ", "trips: 1", "rejected: 1", "hook: true"] {
        assert!(shown.contains(field), "{field} in {shown}");
    }
}
