//! A request that does not hedge allocates nothing beyond its copy (kept
//! for the backup) and the one shared slot the balancer writes its pick in:
//! counted by a global allocator, through the layer alone and through the
//! layer over the balancer. A service reuses its slot once the last
//! request is done, so the steady state allocates one less.
//!
//! One test in this binary, so no other test allocates while it counts.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};

use tower::discover::ServiceList;
use tower::{Layer, Service};
use tower_model_balance::backend::{BackendId, PickedSlot};
use tower_model_balance::balance::{Backend, BalanceConfig, ModelBalancer};
use tower_model_balance::hedge::{HedgeConfig, HedgeLayer};
use tower_model_balance_test_support::counting_alloc::{Counting, ALLOCATIONS};
use tower_model_balance_test_support::ready::{idle_runtime, request, Ready};

#[global_allocator]
static GLOBAL: Counting = Counting;

const N: usize = 1_000;

fn requests() -> Vec<http::Request<()>> {
    (0..N)
        .map(|i| request(&format!("model-{}", i % 16), "inference"))
        .collect()
}

/// Allocations of what a hedged request must pay: its copy, then the slot
/// put in its extensions.
fn baseline() -> usize {
    let requests = requests();
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for mut req in requests {
        let copy = req.clone();
        req.extensions_mut().insert(PickedSlot::new());
        drop((req, copy));
    }
    ALLOCATIONS.load(Ordering::Relaxed) - before
}

/// Allocations of `N` requests through `service`, each to the end of its
/// response, after `N` uncounted.
fn through<S>(mut service: S) -> usize
where
    S: Service<http::Request<()>>,
    S::Error: std::fmt::Debug,
{
    let mut cx = Context::from_waker(Waker::noop());
    let mut send = |service: &mut S, req| {
        assert!(service.poll_ready(&mut cx).is_ready());
        let future = pin!(service.call(req));
        let Poll::Ready(Ok(response)) = future.poll(&mut cx) else {
            panic!("the endpoint answers at once");
        };
        drop(response);
    };
    for req in requests() {
        send(&mut service, req);
    }
    let requests = requests();
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for req in requests {
        send(&mut service, req);
    }
    ALLOCATIONS.load(Ordering::Relaxed) - before
}

#[test]
fn a_request_that_does_not_hedge_allocates_only_its_copy_and_slot() {
    // Armed from the first request: every request is copied and carries a
    // slot, none hedges (the endpoint answers at the first poll).
    let policy = HedgeConfig::builder().min_samples(0).build().unwrap();
    let layer = HedgeLayer::new(policy);
    let expected = baseline();
    assert!(expected >= N, "the copy and the slot allocate: {expected}");

    // At most: a service reuses its slot once the last request is done.
    let alone = through(layer.layer(Ready));
    assert!(alone <= expected, "the layer alone: {alone} vs {expected}");
    assert!(
        alone + N >= expected,
        "a slot is at most reused: {alone} vs {expected}"
    );

    let backends: Vec<_> = (0..8)
        .map(|i| Backend::new(BackendId::new(&format!("b{i}")).unwrap(), Ready))
        .collect();
    let runtime = idle_runtime().enter();
    let balancer = ModelBalancer::new(ServiceList::new(backends), BalanceConfig::default())
        .expect("inside a runtime");
    drop(runtime);
    let stacked = through(layer.layer(balancer));
    assert!(
        stacked <= expected,
        "over the balancer: {stacked} vs {expected}"
    );

    let stats = layer.handle().stats();
    assert_eq!((stats.requests, stats.hedges), (4 * N as u64, 0));
}
