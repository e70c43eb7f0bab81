use std::sync::atomic::Ordering;
use std::time::Duration;

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
    let (breaker, ticket) = scoped
        .try_acquire(uid, key, &Arc::default(), now)
        .expect("closed");
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
    assert!(pairs.try_acquire(1, A, &Arc::default(), now).is_none());
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
            drop(pairs.try_acquire(uid, key, &Arc::default(), now));
            assert!(pairs.len() <= 10);
        }
    }
    assert_eq!(pairs.len(), 10);
}

#[test]
fn an_open_pair_still_asked_for_stays_tracked() {
    let (pairs, now) = (scoped(2), Instant::now());
    trip(&pairs, 1, A, now);
    drop(pairs.try_acquire(2, B, &Arc::default(), now));
    // (1, A) is the least recently used, but a request checks it.
    assert!(!pairs.admits(1, A, now));
    drop(pairs.try_acquire(3, C, &Arc::default(), now));
    assert_eq!(pairs.state(1, A, now), BreakerState::Open, "(2, B) went");
    drop(pairs.try_acquire(2, B, &Arc::default(), now));
    drop(pairs.try_acquire(3, C, &Arc::default(), now));
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
    let (held, ticket) = pairs
        .try_acquire(1, A, &Arc::default(), now)
        .expect("closed");
    drop(pairs.try_acquire(2, B, &Arc::default(), now));
    assert_eq!(pairs.len(), 1);
    // The evicted breaker opens on this failure, then goes with the ticket's
    // holder.
    held.record_ticket_at(ticket, Outcome::Failure, None, now);
    drop(held);
    assert_eq!(gauges(&pairs), 0);
    assert!(pairs.admits(1, A, now));
    assert!(
        pairs.try_acquire(1, A, &Arc::default(), now).is_some(),
        "a fresh breaker"
    );
    assert_eq!(pairs.state(1, A, now), BreakerState::Closed);
}

#[test]
fn slots_scale_with_the_bound() {
    assert_eq!(scoped(1).not_closed.len(), 1);
    assert_eq!(scoped(100).not_closed.len(), 128);
    assert_eq!(scoped(MAX_PAIRS).not_closed.len(), MAX_SLOTS);
}

#[test]
fn each_backend_counts_its_pairs_trips_and_those_not_closed() {
    let (pairs, now) = (scoped(3), Instant::now());
    let (one, two) = (Arc::<PairCounts>::default(), Arc::<PairCounts>::default());
    let fail = |uid, key, counts: &Arc<PairCounts>| {
        let (breaker, ticket) = pairs.try_acquire(uid, key, counts, now).expect("closed");
        breaker.record_ticket_at(ticket, Outcome::Failure, None, now);
    };
    fail(1, A, &one);
    fail(1, B, &one);
    fail(2, A, &two);
    assert_eq!((one.trips(), one.not_closed()), (2, 2));
    assert_eq!((two.trips(), two.not_closed()), (1, 1));
    assert_eq!(pairs.trips(), 3, "the fleet's sum");
    // The open (1, A) is evicted by a new pair: it no longer counts open,
    // its trip stays counted.
    drop(pairs.try_acquire(2, C, &two, now));
    assert_eq!((one.trips(), one.not_closed()), (2, 1));
    // A pair that closes again leaves the count.
    let later = now + Duration::from_secs(60);
    for _ in 0..10 {
        if pairs.state(2, A, later) == BreakerState::Closed {
            break;
        }
        assert_eq!(two.not_closed(), 1, "half-open is not closed");
        let (breaker, ticket) = pairs.try_acquire(2, A, &two, later).expect("half-open");
        breaker.record_ticket_at(ticket, Outcome::Success, None, later);
    }
    assert_eq!(pairs.state(2, A, later), BreakerState::Closed);
    assert_eq!((two.trips(), two.not_closed()), (1, 0));
}
