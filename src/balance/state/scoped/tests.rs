use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::*;
use crate::balance::config::fields::MAX_PAIRS;
use crate::classify::Outcome;

const A: u64 = 0xa;
const B: u64 = 0xb;
const C: u64 = 0xc;

/// Breakers that open on one failure.
fn scoped(max_pairs: usize) -> Scoped {
    let policy = BreakerConfig::builder()
        .window(2)
        .minimum_calls(1)
        .build()
        .unwrap();
    Scoped::new(policy, max_pairs)
}

fn trip(scoped: &Scoped, uid: u64, key: u64, now: Instant) {
    let (breaker, ticket) = scoped.try_acquire(uid, key, now).expect("closed");
    breaker.record_ticket_at(ticket, Outcome::Failure, None, now);
}

fn gauges(scoped: &Scoped) -> usize {
    scoped
        .not_closed
        .iter()
        .map(|g| g.load(Ordering::Relaxed))
        .sum()
}

#[test]
fn a_pair_trips_alone() {
    let (pairs, now) = (scoped(16), Instant::now());
    assert!(pairs.admits(1, A, now), "untracked pairs start closed");
    trip(&pairs, 1, A, now);
    assert!(!pairs.admits(1, A, now));
    assert!(pairs.try_acquire(1, A, now).is_none());
    assert_eq!(pairs.state(1, A, now), BreakerState::Open);
    assert!(pairs.admits(1, B, now), "same backend, other model");
    assert!(pairs.admits(2, A, now), "same model, other backend");
    assert_eq!(pairs.state(1, B, now), BreakerState::Closed);
    assert_eq!(gauges(&pairs), 1);
    assert_eq!(pairs.len(), 1, "checks and states insert nothing");
}

#[test]
fn never_more_pairs_than_the_bound() {
    let (pairs, now) = (scoped(10), Instant::now());
    for uid in 0..10 {
        for key in 0..10 {
            drop(pairs.try_acquire(uid, key, now));
            assert!(pairs.len() <= 10);
        }
    }
    assert_eq!(pairs.len(), 10);
}

#[test]
fn an_open_pair_still_asked_for_stays_tracked() {
    let (pairs, now) = (scoped(2), Instant::now());
    trip(&pairs, 1, A, now);
    drop(pairs.try_acquire(2, B, now));
    // (1, A) is the least recently used, but a request checks it.
    assert!(!pairs.admits(1, A, now));
    drop(pairs.try_acquire(3, C, now));
    assert_eq!(pairs.state(1, A, now), BreakerState::Open, "(2, B) went");
    drop(pairs.try_acquire(2, B, now));
    drop(pairs.try_acquire(3, C, now));
    assert_eq!(
        pairs.state(1, A, now),
        BreakerState::Closed,
        "evicted once unused: forgotten"
    );
    assert_eq!(gauges(&pairs), 0, "the evicted breaker left its gauge");
    assert!(pairs.admits(1, A, now));
}

#[test]
fn an_evicted_pair_records_harmlessly() {
    let (pairs, now) = (scoped(1), Instant::now());
    let (held, ticket) = pairs.try_acquire(1, A, now).expect("closed");
    drop(pairs.try_acquire(2, B, now));
    assert_eq!(pairs.len(), 1);
    // The evicted breaker opens on this failure, then goes with the ticket's
    // holder.
    held.record_ticket_at(ticket, Outcome::Failure, None, now);
    drop(held);
    assert_eq!(gauges(&pairs), 0);
    assert!(pairs.admits(1, A, now));
    assert!(pairs.try_acquire(1, A, now).is_some(), "a fresh breaker");
    assert_eq!(pairs.state(1, A, now), BreakerState::Closed);
}

#[test]
fn slots_scale_with_the_bound() {
    assert_eq!(scoped(1).not_closed.len(), 1);
    assert_eq!(scoped(100).not_closed.len(), 128);
    assert_eq!(scoped(MAX_PAIRS).not_closed.len(), MAX_SLOTS);
}
