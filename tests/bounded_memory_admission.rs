//! A flood at ten times the fleet's capacity for a minute leaves the
//! balancer's memory where it was: under admission what waits is bounded
//! by the queue's capacity, what runs by the backends' limits, and a shed
//! request keeps nothing. Live heap bytes are counted by a global
//! allocator; Tokio's clock is paused, so the minute is virtual and every
//! figure exact.
//!
//! One test in this binary, so no other test allocates while it counts.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tower::discover::ServiceList;
use tower::{service_fn, BoxError, ServiceExt};
use tower_model_balance::backend::BackendId;
use tower_model_balance::balance::{AdmissionConfig, Backend, BalanceConfig, Limit, ModelBalancer};
use tower_model_balance::error::Overloaded;
use tower_model_balance_test_support::live_heap;

#[global_allocator]
static GLOBAL: live_heap::Counting = live_heap::Counting;

const BACKENDS: usize = 4;
const LIMIT: usize = 4;
const SERVICE: Duration = Duration::from_millis(50);
const QUEUE: usize = 64;
/// Requests a millisecond: ten times what the backends serve
/// (`BACKENDS × LIMIT / SERVICE` = 320 a second).
const PER_MS: usize = 10 * BACKENDS * LIMIT * 1000 / 50 / 1000;

#[derive(Default)]
struct Tally {
    outstanding: AtomicUsize,
    ok: AtomicUsize,
    shed: AtomicUsize,
    other: AtomicUsize,
}

/// Floods `balancer` for `ms` milliseconds, every third request
/// `Critical`, checking the caps every millisecond; then waits for every
/// request to end. Returns the most requests outstanding at once.
async fn flood<S>(
    balancer: &S,
    tally: &Arc<Tally>,
    handle: &tower_model_balance::balance::BalancerHandle,
    ms: usize,
) -> usize
where
    S: tower::Service<http::Request<()>, Error = BoxError> + Clone + Send + 'static,
    S::Response: Send + 'static,
    S::Future: Send,
{
    let mut peak = 0;
    for tick in 0..ms {
        for i in 0..PER_MS {
            let urgency = if (tick * PER_MS + i).is_multiple_of(3) {
                "critical"
            } else {
                "normal"
            };
            let req = http::Request::post("/infer")
                .header("x-model-id", format!("m{}", (tick * PER_MS + i) % 32))
                .header("x-urgency", urgency)
                .body(())
                .unwrap();
            let (balancer, tally) = (balancer.clone(), tally.clone());
            tally.outstanding.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let counter = match balancer.oneshot(req).await {
                    Ok(_) => &tally.ok,
                    Err(e) if e.is::<Overloaded>() => &tally.shed,
                    Err(_) => &tally.other,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                tally.outstanding.fetch_sub(1, Ordering::Relaxed);
            });
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(handle.queue_len() <= QUEUE, "the queue past its capacity");
        for b in handle.backends() {
            // A quarter of the limit above it for `Critical`.
            assert!(b.in_flight <= LIMIT + 1, "{} held {}", b.id, b.in_flight);
        }
        peak = peak.max(tally.outstanding.load(Ordering::Relaxed));
    }
    while tally.outstanding.load(Ordering::Relaxed) > 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    peak
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_minute_at_ten_times_capacity_leaves_memory_flat() {
    let backends: Vec<_> = (0..BACKENDS)
        .map(|i| {
            let endpoint = service_fn(|_req: http::Request<()>| async {
                tokio::time::sleep(SERVICE).await;
                Ok::<_, BoxError>(http::Response::new(String::from("ok")))
            });
            Backend::new(BackendId::new(&format!("gpu-{i}")).unwrap(), endpoint)
        })
        .collect();
    let admission = AdmissionConfig::builder(Limit::fixed(LIMIT))
        .queue_capacity(QUEUE)
        .build()
        .unwrap();
    let config = BalanceConfig::builder()
        .admission(admission)
        .build()
        .unwrap();
    let balancer = ModelBalancer::new(ServiceList::new(backends), config).unwrap();
    let handle = balancer.handle();
    let tally = Arc::new(Tally::default());

    // Warm-up: every table and queue at its working size.
    flood(&balancer, &tally, &handle, 5_000).await;
    let before = live_heap::live();
    let peak = flood(&balancer, &tally, &handle, 60_000).await;
    let after = live_heap::live();

    let (ok, shed, other) = (
        tally.ok.load(Ordering::Relaxed),
        tally.shed.load(Ordering::Relaxed),
        tally.other.load(Ordering::Relaxed),
    );
    let stats = handle.stats();
    println!(
        "65 s at {PER_MS} requests/ms: {ok} served, {shed} shed ({} Normal, {} Critical), \
         queue peak {}, at most {peak} requests outstanding",
        stats.shed_normal, stats.shed_critical, stats.queue_peak
    );
    assert_eq!(other, 0, "every request served or shed");
    assert_eq!(ok + shed, 65_000 * PER_MS, "nothing lost");
    assert!(stats.queue_peak as usize <= QUEUE);
    // Served at capacity: 400 a second with `Critical` headroom.
    assert!(ok >= 65 * 300, "{ok} served");
    // Outstanding: what runs, what waits, and one millisecond's arrivals.
    assert!(
        peak <= BACKENDS * (LIMIT + 1) + QUEUE + PER_MS,
        "{peak} outstanding"
    );
    assert_eq!(handle.in_flight(), 0);
    live_heap::assert_flat("admission, 60 s at 10x capacity", before, after);
}
