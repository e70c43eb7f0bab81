//! One million distinct model IDs through a `HedgeLayer` leave its memory
//! where it was: latency windows are kept for the first `max_models`
//! models only (the rest share one), allocated with the layer. Live heap
//! bytes are counted by a global allocator.
//!
//! One test in this binary, so no other test allocates while it counts.

use tower::{service_fn, Layer, ServiceExt};
use tower_model_balance::error::BoxError;
use tower_model_balance::hedge::{HedgeConfig, HedgeLayer};
use tower_model_balance_test_support::live_heap;

#[global_allocator]
static GLOBAL: live_heap::Counting = live_heap::Counting;

const MAX_MODELS: usize = 64;

/// Sends one request for each of `models` distinct IDs from `from`,
/// answered at once.
async fn send(layer: &HedgeLayer, from: usize, models: usize) {
    let backend =
        service_fn(|_req: http::Request<()>| async { Ok::<_, BoxError>(http::Response::new(())) });
    for i in from..from + models {
        let request = http::Request::post("/infer")
            .header("x-model-id", format!("model-{i}"))
            .body(())
            .unwrap();
        layer.layer(backend).oneshot(request).await.unwrap();
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_million_model_ids_leave_the_hedge_memory_flat() {
    let policy = HedgeConfig::builder()
        .max_models(MAX_MODELS)
        .build()
        .unwrap();
    let layer = HedgeLayer::new(policy);
    let handle = layer.handle();

    send(&layer, 0, 10_000).await;
    assert_eq!(
        handle.tracked_models(),
        MAX_MODELS,
        "the windows are all taken"
    );
    let before = live_heap::live();

    send(&layer, 10_000, 990_000).await;
    let after = live_heap::live();
    assert_eq!(handle.tracked_models(), MAX_MODELS, "still at its cap");
    assert_eq!(handle.stats().requests, 1_000_000);
    live_heap::assert_flat("hedge, 10k then 1M model IDs", before, after);
}
