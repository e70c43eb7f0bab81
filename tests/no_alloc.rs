//! The balancer's request path allocates nothing: ready, call, response and
//! completion, counted by a global allocator.
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
use tower::Service;
use tower_model_balance::backend::BackendId;
use tower_model_balance::balance::{Backend, BalanceConfig, ModelBalancer};

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

#[test]
fn ready_call_response_and_completion_allocate_nothing() {
    let backends: Vec<_> = (0..16)
        .map(|i| Backend::new(BackendId::new(&format!("b{i}")).unwrap(), Ready))
        .collect();
    let mut balancer = ModelBalancer::new(ServiceList::new(backends), BalanceConfig::default())
        .expect("a list source needs no runtime");
    let models: Vec<String> = (0..64).map(|i| format!("model-{i}")).collect();
    let kinds = ["inference", "inference", "inference", "update"];
    // Requests are built before counting: their header maps allocate.
    let mut requests: Vec<_> = (0..2_000)
        .map(|i| request(&models[i % models.len()], kinds[i % kinds.len()]))
        .collect();
    let mut cx = Context::from_waker(Waker::noop());
    let mut send = |balancer: &mut ModelBalancer<Ready>, req| {
        assert!(balancer.poll_ready(&mut cx).is_ready());
        let fut = pin!(balancer.call(req));
        let Poll::Ready(Ok(response)) = fut.poll(&mut cx) else {
            panic!("the endpoint answers at once");
        };
        drop(response);
    };
    // Warm up (the demand table's warm-up, arc-swap's thread-local slots).
    for req in requests.drain(..1_000) {
        send(&mut balancer, req);
    }
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
    let stats = balancer.handle().stats();
    assert_eq!(
        stats.resident_owner + stats.cold_owner + stats.spill + stats.update,
        2_000
    );
}
