//! The balancer's request path allocates nothing: ready, call, response and
//! completion, counted by a global allocator, over 16 and 10 000 backends —
//! with a breaker per backend,
//! and with one per (backend, model) pair once the pairs are tracked. The
//! standalone breaker layer, its response body included, allocates nothing
//! either.
//!
//! One test in this binary, so no other test allocates while it counts.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};

use tower::discover::ServiceList;
use tower::util::rng::Rng;
use tower::Service;
use tower_model_balance::backend::BackendId;
use tower_model_balance::balance::{Backend, BalanceConfig, BreakerScope, ModelBalancer};
use tower_model_balance::breaker::{BreakerConfig, CircuitBreakerLayer};
use tower_model_balance_test_support::counting_alloc::{Counting, ALLOCATIONS};
use tower_model_balance_test_support::lcg::Lcg;
use tower_model_balance_test_support::ready::{idle_runtime, request, Ready};

#[global_allocator]
static GLOBAL: Counting = Counting;

fn balancer(backends: usize, config: BalanceConfig) -> ModelBalancer<Ready, Lcg> {
    let backends: Vec<_> = (0..backends)
        .map(|i| Backend::new(BackendId::new(&format!("b{i}")).unwrap(), Ready))
        .collect();
    let _runtime = idle_runtime().enter();
    ModelBalancer::from_rng(ServiceList::new(backends), config, Lcg(3)).expect("inside a runtime")
}

/// Sends `requests` through `balancer`, each to the end of its response:
/// the first `warm_up` uncounted, then the allocations of the rest.
fn allocations<R: Rng>(
    balancer: &mut ModelBalancer<Ready, R>,
    mut requests: Vec<http::Request<()>>,
    warm_up: usize,
) -> usize {
    let mut cx = Context::from_waker(Waker::noop());
    let mut send = |req| {
        assert!(balancer.poll_ready(&mut cx).is_ready());
        let fut = pin!(balancer.call(req));
        let Poll::Ready(Ok(response)) = fut.poll(&mut cx) else {
            panic!("the endpoint answers at once");
        };
        drop(response);
    };
    // Warm up: the demand table, the breaker pairs.
    for req in requests.drain(..warm_up) {
        send(req);
    }
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for req in requests {
        send(req);
    }
    ALLOCATIONS.load(Ordering::Relaxed) - before
}

/// A breaker per backend; inference and updates, over `backends`
/// backends (over 256, a walk lists the members it met inline).
fn per_backend(backends: usize) {
    let mut balancer = balancer(backends, BalanceConfig::default());
    let models: Vec<String> = (0..64).map(|i| format!("model-{i}")).collect();
    let kinds = ["inference", "inference", "inference", "update"];
    // Requests are built before counting: their header maps allocate.
    let requests: Vec<_> = (0..2_000)
        .map(|i| request(&models[i % models.len()], kinds[i % kinds.len()]))
        .collect();
    let allocations = allocations(&mut balancer, requests, 1_000);
    assert_eq!(
        allocations, 0,
        "{allocations} allocations over 1000 requests to {backends} backends"
    );
    let stats = balancer.handle().stats();
    assert_eq!(
        stats.resident_owner + stats.cold_owner + stats.spill + stats.update,
        2_000
    );
}

/// A breaker per (backend, model) pair: inference only, so the measured
/// requests meet only pairs the warm-up tracked (an update by P2C could
/// meet a new pair, whose breaker is allocated once).
fn per_pair() {
    const MODELS: usize = 8;
    let config = BalanceConfig::builder()
        .breaker_scope(BreakerScope::BackendModel { max_pairs: 64 })
        .build()
        .unwrap();
    let mut balancer = balancer(4, config);
    let handle = balancer.handle();
    let models: Vec<String> = (0..MODELS).map(|i| format!("model-{i}")).collect();
    let mut warm_up: Vec<_> = (0..4_000)
        .map(|i| request(&models[i % MODELS], "inference"))
        .collect();
    let measured = warm_up.split_off(2_000);
    let n = warm_up.len();
    allocations(&mut balancer, warm_up, n);
    let tracked = handle.stats().tracked_pairs;
    assert!(tracked >= MODELS, "a pair per model at least: {tracked}");
    let allocations = allocations(&mut balancer, measured, 0);
    assert_eq!(
        allocations, 0,
        "{allocations} allocations over 2000 requests"
    );
    assert_eq!(handle.stats().tracked_pairs, tracked, "no new pair was met");
}

/// The breaker layer alone: admission, the response future, the body
/// wrapper and the record at its end.
fn breaker_layer() {
    use tower::Layer;
    let policy = BreakerConfig::builder()
        .build()
        .expect("the default policy");
    let mut svc = CircuitBreakerLayer::new(policy).layer(Ready);
    let mut cx = Context::from_waker(Waker::noop());
    let mut send = || {
        assert!(svc.poll_ready(&mut cx).is_ready());
        let fut = pin!(svc.call(http::Request::new(())));
        let Poll::Ready(Ok(response)) = fut.poll(&mut cx) else {
            panic!("the endpoint answers at once");
        };
        drop(response);
    };
    for _ in 0..100 {
        send();
    }
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..1_000 {
        send();
    }
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    assert_eq!(allocations, 0, "{allocations} allocations over 1000 calls");
    assert_eq!(svc.breaker().stats().failures, 0);
}

#[test]
fn the_request_path_allocates_nothing() {
    per_backend(16);
    per_backend(10_000);
    per_pair();
    breaker_layer();
}
