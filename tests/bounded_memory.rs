//! One million distinct model IDs through the balancer leave its memory
//! where it was: the per-model state — demand buckets, residency slots,
//! the (backend, model) breakers of the per-model scope — is bounded by its
//! configured cap, whatever the number of models. Live heap bytes are
//! counted by a global allocator.
//!
//! One test in this binary, so no other test allocates while it counts.

use futures_util::stream;
use tower::discover::Change;
use tower_model_balance::backend::BackendId;
use tower_model_balance::balance::{Backend, BalanceConfig, BreakerScope, ModelBalancer};
use tower_model_balance::classify::Outcome;
use tower_model_balance::route::{ModelId, RouteInfo};
use tower_model_balance_test_support::live_heap;

#[global_allocator]
static GLOBAL: live_heap::Counting = live_heap::Counting;

const MAX_PAIRS: usize = 2_000;

/// Picks and finishes one request for each of `models` distinct IDs
/// starting at `from`; every tenth fails, so pair breakers have failures
/// to remember.
fn send(balancer: &mut ModelBalancer<u32>, from: usize, models: usize) {
    let now = tokio::time::Instant::now();
    for i in from..from + models {
        let route = RouteInfo::new(ModelId::new(&format!("model-{i}")).unwrap());
        let picked = balancer.pick(&route, now).expect("eight backends admit");
        let outcome = if i % 10 == 0 {
            Outcome::Failure
        } else {
            Outcome::Success
        };
        picked.guard.finish_at(outcome, now);
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_million_model_ids_leave_memory_flat() {
    let backends = (0..8u32).map(|i| {
        let id = BackendId::new(&format!("gpu-{i}")).unwrap();
        Ok::<_, std::convert::Infallible>(Change::Insert(i, Backend::new(id, i)))
    });
    let config = BalanceConfig::builder()
        .breaker_scope(BreakerScope::BackendModel {
            max_pairs: MAX_PAIRS,
        })
        .build()
        .unwrap();
    let mut balancer = ModelBalancer::new(stream::iter(backends), config).unwrap();
    let handle = balancer.handle();

    // Warm-up: every bounded table fills.
    send(&mut balancer, 0, 100_000);
    assert_eq!(
        handle.stats().tracked_pairs,
        MAX_PAIRS,
        "the pair table is full"
    );
    let before = live_heap::live();

    send(&mut balancer, 100_000, 900_000);
    let after = live_heap::live();
    assert_eq!(handle.stats().tracked_pairs, MAX_PAIRS, "still at its cap");
    assert_eq!(handle.in_flight(), 0);
    live_heap::assert_flat("balancer, 100k then 1M model IDs", before, after);
}
