//! One `Breaker` raced by many tasks on a multi-thread runtime: half-open
//! grants exactly `half_open_permits` probes per round, permits dropped
//! without a record (cancelled tasks) come back, and counts add up. Driven
//! by barriers and channels, never by sleeping; the clock is injected.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, Barrier};
use tokio::time::Instant;
use tower_model_balance::breaker::{
    Breaker, BreakerConfig, BreakerState, Permit, Reason, Transition,
};
use tower_model_balance::classify::Outcome;

const TASKS: usize = 64;
const PERMITS: u32 = 5;

/// Half-open rounds start this long apart (the open duration is 1 s).
const ROUND: Duration = Duration::from_secs(10);

type Seen = Arc<Mutex<Vec<Reason>>>;

/// A breaker tripped at `t0`, whose hook logs reasons: 5 probes a round,
/// one failed probe (20%) reopens it, for 1 s exactly.
fn tripped() -> (Breaker, Instant, Seen) {
    let policy = BreakerConfig::builder()
        .window(2)
        .minimum_calls(1)
        .failure_rate_threshold(0.2)
        .half_open_permits(PERMITS)
        .half_open_max_wait(Duration::from_secs(3600))
        .open_duration(Duration::from_secs(1))
        .max_open_duration(Duration::from_secs(1))
        .jitter(false)
        .build()
        .unwrap();
    let seen = Seen::default();
    let log = seen.clone();
    let breaker = Breaker::with_hook(policy, move |t: &Transition| {
        log.lock().unwrap().push(t.reason)
    });
    let t0 = Instant::now();
    breaker
        .try_acquire_at(t0)
        .unwrap()
        .record_at(Outcome::Failure, t0);
    assert_eq!(breaker.state_at(t0), BreakerState::Open);
    (breaker, t0, seen)
}

/// `TASKS` tasks released at once by a barrier, each asking for a permit
/// at `at`; the permits granted, and how many were refused.
async fn race(breaker: &Breaker, at: Instant) -> (Vec<Permit>, usize) {
    let start = Arc::new(Barrier::new(TASKS));
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (breaker, start) = (breaker.clone(), start.clone());
            tokio::spawn(async move {
                start.wait().await;
                breaker.try_acquire_at(at).ok()
            })
        })
        .collect();
    let mut granted = Vec::new();
    for task in tasks {
        granted.extend(task.await.unwrap());
    }
    let refused = TASKS - granted.len();
    (granted, refused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exactly_half_open_permits_probes_are_granted_per_round() {
    let (breaker, t0, seen) = tripped();
    let mut refused_total = 0;
    for round in 1..=20u32 {
        let at = t0 + ROUND * round;
        let (mut probes, refused) = race(&breaker, at).await;
        assert_eq!(probes.len(), PERMITS as usize, "round {round}");
        assert_eq!(probes.len() + refused, TASKS);
        refused_total += refused;
        // One failed probe reopens the breaker; the others' tickets are
        // now stale, and dropping them changes nothing.
        probes.pop().unwrap().record_at(Outcome::Failure, at);
        assert_eq!(breaker.state_at(at), BreakerState::Open, "round {round}");
        drop(probes);
    }
    assert_eq!(breaker.stats().rejected, refused_total as u64);
    assert_eq!(
        breaker.stats().trips,
        21,
        "the first trip and 20 reopenings"
    );
    let seen = seen.lock().unwrap();
    let half_opened = seen.iter().filter(|&&r| r == Reason::OpenElapsed).count();
    assert_eq!(
        half_opened, 20,
        "one OpenElapsed a round, whoever asked first"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn probes_racing_to_report_close_the_breaker_once() {
    let (breaker, t0, seen) = tripped();
    let at = t0 + ROUND;
    let (probes, _) = race(&breaker, at).await;
    let report = Arc::new(Barrier::new(probes.len()));
    let tasks: Vec<_> = probes
        .into_iter()
        .map(|probe| {
            let report = report.clone();
            tokio::spawn(async move {
                report.wait().await;
                probe.record_at(Outcome::Success, at);
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(breaker.state_at(at), BreakerState::Closed);
    let seen = seen.lock().unwrap().clone();
    let want = [
        Reason::FailureRate,
        Reason::OpenElapsed,
        Reason::ProbesSucceeded,
    ];
    assert_eq!(seen, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn permits_of_cancelled_tasks_come_back() {
    let (breaker, t0, _) = tripped();
    let at = t0 + ROUND;
    let start = Arc::new(Barrier::new(TASKS));
    // Each task says whether it got a permit; a holder then waits forever.
    let (tried, mut answers) = mpsc::unbounded_channel();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (breaker, start, tried) = (breaker.clone(), start.clone(), tried.clone());
            tokio::spawn(async move {
                start.wait().await;
                let permit = breaker.try_acquire_at(at);
                tried.send(permit.is_ok()).unwrap();
                if permit.is_ok() {
                    // A call that never ends, until its task is cancelled.
                    std::future::pending::<()>().await;
                }
                drop(permit);
            })
        })
        .collect();
    drop(tried);
    let mut holders = 0;
    for _ in 0..TASKS {
        holders += usize::from(answers.recv().await.expect("every task answers"));
    }
    assert_eq!(holders, PERMITS as usize);
    assert!(!breaker.admits_at(at), "every probe is out");
    assert!(breaker.try_acquire_at(at).is_err());
    let rejected = breaker.stats().rejected;
    assert_eq!(rejected, (TASKS - PERMITS as usize + 1) as u64);
    // Cancel every task mid-call: the futures holding permits are dropped.
    for task in &tasks {
        task.abort();
    }
    let mut cancelled = 0;
    for task in tasks {
        if task.await.is_err_and(|e| e.is_cancelled()) {
            cancelled += 1;
        }
    }
    assert!(cancelled >= PERMITS as usize, "the holders were cancelled");
    assert!(answers.recv().await.is_none(), "every task answered once");
    assert!(breaker.admits_at(at), "the permits came back");
    // Same round, no transition: the next race gets all the permits again.
    let (probes, refused) = race(&breaker, at).await;
    assert_eq!(
        (probes.len(), refused),
        (PERMITS as usize, TASKS - PERMITS as usize)
    );
    assert_eq!(breaker.state_at(at), BreakerState::HalfOpen);
    // Some given back by dropping, the others by a caller's error: again.
    for (i, probe) in probes.into_iter().enumerate() {
        if i % 2 == 0 {
            drop(probe);
        } else {
            probe.record_at(Outcome::Ignored, at);
        }
    }
    let (probes, _) = race(&breaker, at).await;
    assert_eq!(probes.len(), PERMITS as usize);
    for probe in probes {
        probe.record_at(Outcome::Success, at);
    }
    assert_eq!(breaker.state_at(at), BreakerState::Closed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_records_all_count() {
    const CALLS: u64 = 100;
    // A window large enough for every call, a threshold never reached.
    let policy = BreakerConfig::builder()
        .window(10_000)
        .minimum_calls(10_000)
        .failure_rate_threshold(1.0)
        .build()
        .unwrap();
    let breaker = Breaker::new(policy);
    let now = Instant::now();
    let start = Arc::new(Barrier::new(TASKS));
    let failed = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let (breaker, start, failed) = (breaker.clone(), start.clone(), failed.clone());
            tokio::spawn(async move {
                start.wait().await;
                for j in 0..CALLS {
                    let permit = breaker.try_acquire_at(now).expect("closed");
                    let outcome = if (i as u64 + j).is_multiple_of(3) {
                        failed.fetch_add(1, Ordering::Relaxed);
                        Outcome::Failure
                    } else {
                        Outcome::Success
                    };
                    permit.record_call_at(outcome, Some(Duration::from_millis(1)), now);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    // A count window: what it holds does not depend on the clock.
    let m = breaker.stats();
    let calls = TASKS as u64 * CALLS;
    assert_eq!((m.calls, m.timed_calls), (calls, calls));
    assert_eq!(m.failures, failed.load(Ordering::Relaxed));
    assert_eq!(breaker.state_at(now), BreakerState::Closed);
}
