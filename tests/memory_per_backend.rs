//! The heap a balancer holds per backend stays flat from 1 024 to 10 000
//! backends: its ring (150 points of 16 bytes a backend, and an index of
//! at most two 8-byte buckets a point), its backend table and each
//! backend's state, measured after it has routed a request for each of
//! 128 models. Live heap bytes are counted by a global allocator, from
//! before the balancer is built to after it routed.
//!
//! One test in this binary, so no other test allocates while it counts.

use futures_util::stream;
use tower::discover::Change;
use tower_model_balance::backend::BackendId;
use tower_model_balance::balance::{Backend, BalanceConfig, ModelBalancer};
use tower_model_balance::classify::Outcome;
use tower_model_balance::route::{ModelId, RouteInfo};
use tower_model_balance_test_support::live_heap;

#[global_allocator]
static GLOBAL: live_heap::Counting = live_heap::Counting;

/// The most heap a backend may cost: the ring's 2.4 KB of points and up to
/// 2.4 KB of index, with room for the backend's own state (about 3 KB).
const MAX_PER_BACKEND: f64 = 10.0 * 1024.0;

/// Heap bytes per backend held by a balancer over `n` backends that has
/// routed one request for each of 128 models.
fn heap_per_backend(n: u32) -> f64 {
    let routes: Vec<RouteInfo> = (0..128)
        .map(|i| RouteInfo::new(ModelId::new(&format!("model-{i}")).unwrap()))
        .collect();
    let ids: Vec<BackendId> = (0..n)
        .map(|i| BackendId::new(&format!("backend-{i}")).unwrap())
        .collect();
    let before = live_heap::live();
    let backends = ids
        .into_iter()
        .enumerate()
        .map(|(i, id)| Ok::<_, std::convert::Infallible>(Change::Insert(i, Backend::new(id, i))));
    let mut balancer =
        ModelBalancer::new(stream::iter(backends), BalanceConfig::default()).unwrap();
    let now = tokio::time::Instant::now();
    for route in &routes {
        let picked = balancer.pick(route, now).expect("every backend admits");
        picked.guard.finish_at(Outcome::Success, now);
    }
    let held = live_heap::live() - before;
    assert_eq!(balancer.handle().backends().len(), n as usize);
    drop(balancer);
    held as f64 / f64::from(n)
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn heap_per_backend_is_flat_to_10_000_backends() {
    let small = heap_per_backend(1_024);
    let large = heap_per_backend(10_000);
    println!("heap per backend: {small:.0} B at 1024 backends, {large:.0} B at 10000");
    for (n, bytes) in [(1_024, small), (10_000, large)] {
        assert!(
            bytes <= MAX_PER_BACKEND,
            "{bytes:.0} B per backend at {n} backends (at most {MAX_PER_BACKEND})"
        );
    }
    assert!(
        large <= 1.25 * small,
        "per-backend heap grew with the fleet: {small:.0} B at 1024, {large:.0} B at 10000"
    );
}
