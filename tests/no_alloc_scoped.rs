//! In `BreakerScope::BackendModel`, the request path allocates nothing once
//! every (backend, model) pair it uses is tracked: looking a pair up,
//! refreshing it and taking its permit reuse what is there.
//!
//! One test in this binary, so no other test allocates while it counts.

#[path = "support/ready.rs"]
mod ready;

use std::alloc::{GlobalAlloc, Layout, System};
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};

use tower::discover::ServiceList;
use tower::util::rng::Rng;
use tower::Service;
use tower_model_balance::backend::BackendId;
use tower_model_balance::balance::{Backend, BalanceConfig, BreakerScope, ModelBalancer};

use ready::{request, Ready};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A deterministic RNG, so the warm-up reaches every pair the same way.
#[derive(Clone)]
struct Lcg(u64);

impl Rng for Lcg {
    fn next_u64(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 11
    }
}

#[test]
fn a_tracked_pair_costs_no_allocation() {
    const BACKENDS: usize = 4;
    const MODELS: usize = 8;
    let backends: Vec<_> = (0..BACKENDS)
        .map(|i| Backend::new(BackendId::new(&format!("b{i}")).unwrap(), Ready))
        .collect();
    let config = BalanceConfig::builder()
        .breaker_scope(BreakerScope::BackendModel { max_pairs: 64 })
        .build()
        .unwrap();
    let mut balancer = ModelBalancer::from_rng(ServiceList::new(backends), config, Lcg(3))
        .expect("a list source needs no runtime");
    let handle = balancer.handle();
    let models: Vec<String> = (0..MODELS).map(|i| format!("model-{i}")).collect();
    // Inference only: each model's pairs are its owners', so the measured
    // requests meet only pairs the warm-up tracked (updates by P2C could
    // meet a new pair, whose breaker is allocated once).
    let mut requests: Vec<_> = (0..4_000)
        .map(|i| request(&models[i % MODELS], "inference"))
        .collect();
    let mut cx = Context::from_waker(Waker::noop());
    let mut send = |balancer: &mut ModelBalancer<Ready, Lcg>, req| {
        assert!(balancer.poll_ready(&mut cx).is_ready());
        let fut = pin!(balancer.call(req));
        let Poll::Ready(Ok(response)) = fut.poll(&mut cx) else {
            panic!("the endpoint answers at once");
        };
        drop(response);
    };
    for req in requests.drain(..2_000) {
        send(&mut balancer, req);
    }
    let tracked = handle.tracked_pairs();
    assert!(tracked >= MODELS, "a pair per model at least: {tracked}");
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let n = requests.len();
    for req in requests.drain(..) {
        send(&mut balancer, req);
    }
    let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
    assert_eq!(
        allocations, 0,
        "{allocations} allocations over {n} requests"
    );
    assert_eq!(handle.tracked_pairs(), tracked, "no new pair was met");
}
