//! Admission under overload: each backend's limit holds, a request with no
//! room anywhere waits or is shed by its urgency, a full queue gives way to
//! the more urgent, an adaptive limit follows the backend's answers.
//!
//! Endpoints answer after a fixed latency on Tokio's paused clock, and
//! count how many requests they hold at once: every figure is exact.

use crate::admission as support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;
use tower_model_balance::balance::{
    AdmissionConfig, BalanceConfig, BalancerHandle, Limit, ModelBalancer,
};
use tower_model_balance::route::Urgency;

use support::{config, count_shed, fleet, ok, overloaded, request, send, MS};

#[tokio::test(start_paused = true)]
async fn no_backend_holds_more_than_its_limit_and_normal_requests_are_shed_at_once() {
    let (held, backends) = fleet(4, 10 * MS, ok());
    let admission = AdmissionConfig::builder(Limit::fixed(2)).build().unwrap();
    let balancer = ModelBalancer::new(backends, config(admission)).unwrap();
    let handle = balancer.handle();
    let start = Instant::now();
    let sent: Vec<_> = (0..100)
        .map(|i| {
            send(
                &balancer,
                request(&format!("m{}", i % 8), "inference", "normal"),
            )
        })
        .collect();
    let mut served = 0;
    let mut shed = 0;
    for task in sent {
        let (result, at) = task.await.unwrap();
        match overloaded(&result) {
            Some(e) => {
                shed += 1;
                assert_eq!(at, start, "shed within the call, before any time passed");
                assert_eq!((e.urgency, e.waited), (Urgency::Normal, Duration::ZERO));
                assert_eq!(e.retry_after, Duration::from_secs(1), "the default hint");
            }
            None => {
                result.unwrap();
                served += 1;
            }
        }
    }
    for h in &held {
        assert!(
            h.peak.load(Ordering::SeqCst) <= 2,
            "a backend held more than its limit"
        );
    }
    assert_eq!(served, 8, "two at once on each of four backends");
    assert_eq!(served + shed, 100, "nothing lost");
    let stats = handle.stats();
    assert_eq!(stats.shed_normal, shed as u64);
    assert_eq!(
        (stats.shed_high, stats.shed_critical, stats.queued),
        (0, 0, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn a_critical_request_waits_for_room_where_a_normal_one_is_shed() {
    let (held, backends) = fleet(1, 10 * MS, ok());
    let admission = AdmissionConfig::builder(Limit::fixed(1))
        .critical_headroom(0.0)
        .build()
        .unwrap();
    let balancer = ModelBalancer::new(backends, config(admission)).unwrap();
    let handle = balancer.handle();
    let start = Instant::now();
    let first = send(&balancer, request("m", "inference", "normal"));
    tokio::task::yield_now().await;
    let normal = send(&balancer, request("m", "inference", "normal"));
    let critical = send(&balancer, request("m", "inference", "critical"));
    let (result, at) = normal.await.unwrap();
    assert!(overloaded(&result).is_some(), "{result:?}");
    assert_eq!(at, start);
    let (result, at) = critical.await.unwrap();
    result.unwrap();
    assert_eq!(at - start, 20 * MS, "served once the first request ended");
    first.await.unwrap().0.unwrap();
    assert_eq!(held[0].peak.load(Ordering::SeqCst), 1);
    let stats = handle.stats();
    assert_eq!(
        (stats.shed_normal, stats.queued, stats.queue_peak),
        (1, 1, 1)
    );
    assert_eq!(handle.queue_len(), 0);
}

#[tokio::test(start_paused = true)]
async fn critical_requests_have_headroom_above_the_limit() {
    let (held, backends) = fleet(1, 10 * MS, ok());
    // 4, and a quarter of 4 above it for `Critical`.
    let admission = AdmissionConfig::builder(Limit::fixed(4)).build().unwrap();
    let balancer = ModelBalancer::new(backends, config(admission)).unwrap();
    let normal: Vec<_> = (0..5)
        .map(|_| send(&balancer, request("m", "inference", "normal")))
        .collect();
    tokio::task::yield_now().await;
    let critical = send(&balancer, request("m", "inference", "critical"));
    let start = Instant::now();
    let results: Vec<_> = futures_util::future::join_all(normal).await;
    let shed = count_shed(&results);
    assert_eq!(shed, 1, "the fifth Normal one");
    let (result, at) = critical.await.unwrap();
    result.unwrap();
    assert_eq!(
        at - start,
        10 * MS,
        "the Critical one went in at once, fifth"
    );
    assert_eq!(held[0].peak.load(Ordering::SeqCst), 5);
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_gives_a_high_requests_place_to_a_critical_one() {
    let (_held, backends) = fleet(1, 100 * MS, ok());
    let admission = AdmissionConfig::builder(Limit::fixed(1))
        .critical_headroom(0.0)
        .queue_capacity(1)
        .max_wait(Urgency::High, Duration::from_secs(1))
        .build()
        .unwrap();
    let balancer = ModelBalancer::new(backends, config(admission)).unwrap();
    let handle = balancer.handle();
    let start = Instant::now();
    let first = send(&balancer, request("m", "inference", "normal"));
    tokio::task::yield_now().await;
    let high = send(&balancer, request("m", "inference", "high"));
    tokio::time::sleep(10 * MS).await;
    assert_eq!(handle.queue_len(), 1);
    let critical = send(&balancer, request("m", "inference", "critical"));
    let (result, at) = high.await.unwrap();
    let e = overloaded(&result).expect("pushed out");
    assert_eq!(
        (e.urgency, e.waited, at - start),
        (Urgency::High, 10 * MS, 10 * MS)
    );
    let (result, at) = critical.await.unwrap();
    result.unwrap();
    assert_eq!(
        at - start,
        200 * MS,
        "after the first request's 100 ms, then its own"
    );
    first.await.unwrap().0.unwrap();
    let stats = handle.stats();
    assert_eq!(
        (stats.shed_high, stats.shed_critical, stats.queued),
        (1, 0, 2)
    );
    // Another High request finds a full queue of Critical: shed at once.
    let busy = send(&balancer, request("m", "inference", "normal"));
    tokio::task::yield_now().await;
    let critical = send(&balancer, request("m", "inference", "critical"));
    tokio::task::yield_now().await;
    let (result, at) = send(&balancer, request("m", "inference", "high"))
        .await
        .unwrap();
    assert!(overloaded(&result).is_some());
    assert_eq!(at - start, 200 * MS);
    busy.await.unwrap().0.unwrap();
    critical.await.unwrap().0.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_request_waits_no_longer_than_its_urgency_allows() {
    let (_held, backends) = fleet(1, Duration::from_secs(1), ok());
    let admission = AdmissionConfig::builder(Limit::fixed(1))
        .critical_headroom(0.0)
        .build()
        .unwrap();
    let balancer = ModelBalancer::new(backends, config(admission)).unwrap();
    let handle = balancer.handle();
    let first = send(&balancer, request("m", "inference", "normal"));
    tokio::task::yield_now().await;
    let start = Instant::now();
    let (result, at) = send(&balancer, request("m", "inference", "high"))
        .await
        .unwrap();
    let e = overloaded(&result).expect("gave up");
    assert_eq!(
        (e.waited, at - start),
        (100 * MS, 100 * MS),
        "High's default wait"
    );
    assert_eq!(handle.queue_len(), 0, "out of the queue");
    // A waiting request dropped leaves the queue too.
    let waiting = send(&balancer, request("m", "inference", "critical"));
    tokio::time::sleep(MS).await;
    assert_eq!(handle.queue_len(), 1);
    waiting.abort();
    let _ = waiting.await;
    assert_eq!(handle.queue_len(), 0, "a cancelled waiter left");
    first.await.unwrap().0.unwrap();
    assert_eq!(handle.stats().shed_high, 1);
}

#[tokio::test(start_paused = true)]
async fn updates_are_limited_and_shed_too() {
    let (held, backends) = fleet(2, 10 * MS, ok());
    let admission = AdmissionConfig::builder(Limit::fixed(1)).build().unwrap();
    let balancer = ModelBalancer::new(backends, config(admission)).unwrap();
    let sent: Vec<_> = (0..3)
        .map(|_| send(&balancer, request("m", "update", "normal")))
        .collect();
    let results = futures_util::future::join_all(sent).await;
    let shed = count_shed(&results);
    assert_eq!(shed, 1);
    assert!(held.iter().all(|h| h.peak.load(Ordering::SeqCst) == 1));
}

fn limit(handle: &BalancerHandle) -> usize {
    handle.admission_limits()[0].1
}

#[tokio::test(start_paused = true)]
async fn an_adaptive_limit_grows_while_the_backend_keeps_up_and_backs_off_when_it_fails() {
    let status = ok();
    let (held, backends) = fleet(1, 10 * MS, status.clone());
    let admission = AdmissionConfig::builder(Limit::aimd(2, 16))
        .build()
        .unwrap();
    let balancer = ModelBalancer::new(backends, config(admission)).unwrap();
    let handle = balancer.handle();
    assert_eq!(limit(&handle), 2, "starts at its minimum");
    // Bursts as large as the limit: every request finds room, and the
    // successes at least half full add to it.
    for _ in 0..40 {
        let n = limit(&handle);
        let sent: Vec<_> = (0..n)
            .map(|_| send(&balancer, request("m", "inference", "normal")))
            .collect();
        for task in futures_util::future::join_all(sent).await {
            task.unwrap().0.unwrap();
        }
    }
    let grown = limit(&handle);
    assert!(grown >= 8, "grew from 2 to {grown}");
    assert!(held[0].peak.load(Ordering::SeqCst) <= 16);
    // The backend fails: each failure takes a tenth off, down to the minimum.
    status.store(503, Ordering::SeqCst);
    for _ in 0..40 {
        let _ = send(&balancer, request("m", "inference", "normal"))
            .await
            .unwrap();
    }
    assert_eq!(limit(&handle), 2, "backed off to its minimum");
}

#[tokio::test(start_paused = true)]
async fn a_request_waiting_for_one_model_does_not_shed_another() {
    use tower_model_balance::route::ModelId;
    let (_held, backends) = fleet(2, 500 * MS, ok());
    let admission = AdmissionConfig::builder(Limit::fixed(1))
        .critical_headroom(0.0)
        .build()
        .unwrap();
    let config = BalanceConfig::builder()
        .owners(1)
        .admission(admission)
        .build()
        .unwrap();
    let balancer = ModelBalancer::new(backends, config).unwrap();
    let handle = balancer.handle();
    let owner = |m: &str| handle.owners(&ModelId::new(m).unwrap())[0].clone();
    let a = "m0";
    let b = (1..100)
        .map(|i| format!("m{i}"))
        .find(|m| owner(m) != owner(a))
        .unwrap();
    let first = send(&balancer, request(a, "inference", "normal"));
    tokio::task::yield_now().await;
    let waiting = send(&balancer, request(a, "inference", "critical"));
    tokio::time::sleep(MS).await;
    assert_eq!(
        handle.queue_len(),
        1,
        "a Critical request waits for `{a}`'s owner"
    );
    // `b`'s owner is idle: a Normal request for it goes there.
    let (result, _) = send(&balancer, request(&b, "inference", "normal"))
        .await
        .unwrap();
    result.unwrap();
    first.await.unwrap().0.unwrap();
    waiting.await.unwrap().0.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_hedge_sends_no_backup_for_a_request_the_balancer_shed() {
    use tower::Layer;
    use tower_model_balance::hedge::{HedgeConfig, HedgeLayer};
    let (_held, backends) = fleet(1, 10 * MS, ok());
    let admission = AdmissionConfig::builder(Limit::fixed(1)).build().unwrap();
    let balancer = ModelBalancer::new(backends, config(admission)).unwrap();
    let layer = HedgeLayer::new(HedgeConfig::default());
    let hedge = layer.handle();
    let hedged = layer.layer(balancer);
    // A hundred answered requests: the budget holds backups to spend.
    for _ in 0..100 {
        let (result, _) = send(&hedged, request("m", "inference", "normal"))
            .await
            .unwrap();
        result.unwrap();
    }
    let first = send(&hedged, request("m", "inference", "normal"));
    tokio::task::yield_now().await;
    let start = Instant::now();
    let (result, at) = send(&hedged, request("m", "inference", "normal"))
        .await
        .unwrap();
    assert!(overloaded(&result).is_some(), "{result:?}");
    assert_eq!(at, start, "shed at once, through the hedge");
    let stats = hedge.stats();
    assert_eq!(
        (stats.hedges, stats.hedges_after_failure),
        (0, 0),
        "no backup into an overload"
    );
    first.abort();
}
