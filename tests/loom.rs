//! Model checks with [loom]: every interleaving (within a preemption
//! bound) of a few threads racing the breaker's half-open probe permits
//! and the balancer's in-flight counters, a dropped permit or guard
//! standing for a request cancelled at that point.
//!
//! Under `--cfg loom` the library's own atomics and locks in
//! `breaker/shared.rs` and `balance/traffic.rs` are loom's (`src/sync.rs`),
//! so loom checks the real code. Run with its own target directory, as the
//! flag rebuilds every dependency:
//!
//! ```sh
//! RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release -p tower-model-balance --test loom
//! ```
//!
//! [loom]: https://docs.rs/loom
#![cfg(loom)]

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;
use tokio::time::Instant;
use tower::discover::ServiceList;
use tower::service_fn;
use tower_model_balance::backend::{Backend, BackendId};
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
use tower_model_balance::breaker::{Breaker, BreakerConfig, BreakerState};
use tower_model_balance::classify::Outcome;
use tower_model_balance::route::{ModelId, RouteInfo};

/// Open for 1 s exactly; `permits` probes a round, any failed probe of two
/// reopens it (50%), a round never times out here.
fn policy(permits: u32) -> BreakerConfig {
    BreakerConfig::builder()
        .window(2)
        .minimum_calls(1)
        .failure_rate_threshold(0.5)
        .half_open_permits(permits)
        .half_open_max_wait(Duration::from_secs(3600))
        .open_duration(Duration::from_secs(1))
        .max_open_duration(Duration::from_secs(1))
        .jitter(false)
        .build()
        .unwrap()
}

/// Trips `breaker` at `t0`; it is half-open from `t0 + 1 s`.
fn trip(breaker: &Breaker, t0: Instant) {
    breaker
        .try_acquire_at(t0)
        .unwrap()
        .record_at(Outcome::Failure, t0);
    assert_eq!(breaker.state_at(t0), BreakerState::Open);
}

/// A model with a preemption bound, so that each check ends in seconds.
fn model(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(bound);
    builder.check(f);
}

/// How many permits `breaker` grants at `now` before refusing, given back
/// uncounted afterwards.
fn free_permits(breaker: &Breaker, now: Instant) -> usize {
    let permits: Vec<_> = std::iter::from_fn(|| breaker.try_acquire_at(now).ok())
        .take(8)
        .collect();
    permits.len()
}

/// Half-open with one probe permit: two threads race for it and cancel.
/// Never are two permits out at once, at least one thread gets it, and
/// afterwards the permit is back: the breaker is not wedged.
#[test]
fn a_half_open_permit_is_exclusive_and_comes_back_when_cancelled() {
    model(3, || {
        let breaker = Breaker::new(policy(1));
        let t0 = Instant::now();
        trip(&breaker, t0);
        let t1 = t0 + Duration::from_secs(10);
        let out = Arc::new(AtomicUsize::new(0));
        let granted = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (breaker, out, granted) = (breaker.clone(), out.clone(), granted.clone());
                thread::spawn(move || {
                    if let Ok(permit) = breaker.try_acquire_at(t1) {
                        granted.fetch_add(1, Ordering::SeqCst);
                        assert_eq!(out.fetch_add(1, Ordering::SeqCst), 0, "two probes out");
                        out.fetch_sub(1, Ordering::SeqCst);
                        drop(permit); // cancelled
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert!(granted.load(Ordering::SeqCst) >= 1);
        assert_eq!(breaker.state_at(t1), BreakerState::HalfOpen);
        assert_eq!(free_permits(&breaker, t1), 1, "the permit came back once");
        assert_eq!(breaker.stats().trips, 1);
    });
}

/// Half-open with two permits: one probe succeeds while another is
/// cancelled and a third caller races them. Whatever the order, the
/// breaker ends closed (two successes) or still half-open with its
/// permits back — never open, never wedged with a permit lost.
#[test]
fn a_cancelled_probe_racing_a_success_never_wedges_the_round() {
    model(3, || {
        let breaker = Breaker::new(policy(2));
        let t0 = Instant::now();
        trip(&breaker, t0);
        let t1 = t0 + Duration::from_secs(10);
        let succeeded = Arc::new(AtomicUsize::new(0));
        let spawn = |cancel: bool| {
            let (breaker, succeeded) = (breaker.clone(), succeeded.clone());
            thread::spawn(move || {
                if let Ok(permit) = breaker.try_acquire_at(t1) {
                    if cancel {
                        drop(permit);
                    } else {
                        succeeded.fetch_add(1, Ordering::SeqCst);
                        permit.record_at(Outcome::Success, t1);
                    }
                }
            })
        };
        let threads = [spawn(false), spawn(true)];
        if let Ok(permit) = breaker.try_acquire_at(t1) {
            succeeded.fetch_add(1, Ordering::SeqCst);
            permit.record_at(Outcome::Success, t1);
        }
        threads.into_iter().for_each(|t| t.join().unwrap());
        let state = breaker.state_at(t1);
        match succeeded.load(Ordering::SeqCst) {
            2 => assert_eq!(state, BreakerState::Closed),
            1 => {
                assert_eq!(state, BreakerState::HalfOpen);
                assert_eq!(
                    free_permits(&breaker, t1),
                    1,
                    "one probe reported, one left"
                );
            }
            n => panic!("{n} probes succeeded: one at least is always admitted"),
        }
        assert_eq!(breaker.stats().trips, 1);
    });
}

/// Half-open with two permits: a failed probe reopens the breaker while
/// another caller's probe is cancelled. The stale permit given back after
/// the reopening must not add a permit to the next round.
#[test]
fn a_probe_cancelled_across_a_reopening_does_not_leak_into_the_next_round() {
    model(3, || {
        let breaker = Breaker::new(policy(2));
        let t0 = Instant::now();
        trip(&breaker, t0);
        let t1 = t0 + Duration::from_secs(10);
        let canceller = {
            let breaker = breaker.clone();
            thread::spawn(move || drop(breaker.try_acquire_at(t1)))
        };
        let failed = breaker
            .try_acquire_at(t1)
            .map(|permit| permit.record_at(Outcome::Failure, t1));
        canceller.join().unwrap();
        if failed.is_ok() {
            assert_eq!(breaker.state_at(t1), BreakerState::Open);
            assert_eq!(breaker.stats().trips, 2);
        }
        let t2 = t1 + Duration::from_secs(10);
        assert_eq!(
            free_permits(&breaker, t2),
            2,
            "a round has its permits, no more"
        );
    });
}

/// One backend behind the balancer, panic mode off, its breaker closed
/// or (`tripped`) half-open with one probe permit: two threads pick (each
/// its own clone of the balancer) and one finishes its request while the
/// other drops it (cancelled). While a guard lives the in-flight count
/// includes it; afterwards every count is back to zero, each pick counted
/// once, and a probe permit is back unless a success closed the breaker.
fn balancer_race(tripped: bool) {
    let id = BackendId::new("gpu-0").unwrap();
    let config = BalanceConfig::builder()
        .breaker(policy(1))
        .panic_threshold(0.0)
        .build()
        .unwrap();
    // The constructor spawns its health task: on a runtime never driven
    // (the task never runs), dropped at the end of this iteration.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let endpoint = service_fn(|()| std::future::ready(Ok::<(), Infallible>(())));
    let backends = ServiceList::new::<()>(vec![Backend::new(id.clone(), endpoint)]);
    let entered = runtime.enter();
    let balancer = ModelBalancer::new(backends, config).unwrap();
    drop(entered);
    let handle = balancer.handle();
    let breaker = handle.breaker(&id).unwrap();
    let t0 = Instant::now();
    if tripped {
        trip(&breaker, t0);
    }
    let t1 = t0 + Duration::from_secs(10);
    let route = RouteInfo::new(ModelId::new("llama-3-8b").unwrap());
    let picks = Arc::new(AtomicUsize::new(0));
    let spawn = |finish: bool| {
        let (mut balancer, handle, route, picks) = (
            balancer.clone(),
            handle.clone(),
            route.clone(),
            picks.clone(),
        );
        thread::spawn(move || {
            let Ok(picked) = balancer.pick_at(&route, t1) else {
                return;
            };
            picks.fetch_add(1, Ordering::SeqCst);
            let in_flight = handle.in_flight();
            assert!((1..=2).contains(&in_flight), "{in_flight} in flight");
            if finish {
                picked.guard.finish_at(Outcome::Success, t1);
            } else {
                drop(picked); // cancelled
            }
        })
    };
    let threads = [spawn(true), spawn(false)];
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(handle.in_flight(), 0);
    assert_eq!(handle.backends()[0].in_flight, 0);
    let stats = handle.stats();
    let picked = stats.resident_owner + stats.cold_owner + stats.spill + stats.panic;
    assert_eq!(picked, picks.load(Ordering::SeqCst) as u64);
    assert_eq!(picked + stats.no_backend, 2, "each request counted once");
    if !tripped {
        assert_eq!(picked, 2, "a closed breaker admits both");
    }
    assert!(picked >= 1, "the first pick is always admitted");
    match breaker.state_at(t1) {
        BreakerState::Closed => {}
        state => {
            assert_eq!(state, BreakerState::HalfOpen);
            assert_eq!(free_permits(&breaker, t1), 1, "the probe permit came back");
        }
    }
}

#[test]
fn in_flight_counts_survive_cancellation() {
    model(3, || balancer_race(false));
}

#[test]
fn in_flight_counts_and_probe_permits_survive_cancellation() {
    model(3, || balancer_race(true));
}
