//! The hedge's answer to a `call` made without `poll_ready`, as every
//! layer of the crate answers it (the crate docs' "Readiness"):
//! `NotReady`, nothing sent, no budget taken or deposited, nothing
//! counted; readiness consumed by `call` and never cloned.

use crate::hedge_script;

use std::sync::atomic::Ordering;

use tower::{Layer, Service, ServiceExt};
use tower_model_balance::error::{BoxError, NotReady};
use tower_model_balance::hedge::{HedgeHandle, HedgeLayer, HedgeStats};

use hedge_script::{never, ok_after, policy, request, stats, Script};

/// `future`'s error, which must be `NotReady`.
async fn not_ready<T>(what: &str, future: impl std::future::Future<Output = Result<T, BoxError>>) {
    let Err(error) = future.await else {
        panic!("{what}: served a call made without `poll_ready`");
    };
    assert!(error.is::<NotReady>(), "{what}: {error}");
}

/// What a call may leave behind: the counters, the budget's grants and
/// refusals, the latency windows.
fn trace(handle: &HedgeHandle) -> (HedgeStats, u64, u64, usize) {
    let budget = handle.budget();
    let windows = handle.tracked_models();
    (handle.stats(), budget.granted(), budget.refused(), windows)
}

#[tokio::test(start_paused = true)]
async fn a_call_without_poll_ready_is_not_ready_and_sends_nothing() {
    let layer = HedgeLayer::new(policy().build().unwrap());
    let handle = layer.handle();
    // A slow first attempt, then a fast backup: a served call hedges.
    let (script, seen) = Script::new(vec![never(), ok_after(1)]);
    let mut hedge = layer.layer(script);
    let fresh = trace(&handle);

    not_ready("never polled", hedge.call(request("inference"))).await;
    assert_eq!(seen.calls.load(Ordering::SeqCst), 0, "nothing sent");
    assert_eq!(trace(&handle), fresh, "nothing taken or counted");

    // Polled ready, the same service sends, and hedges.
    let response = hedge.ready().await.unwrap().call(request("inference"));
    assert_eq!(*response.await.expect("the backup answers").body(), "1");
    assert_eq!(seen.calls.load(Ordering::SeqCst), 2);
    let served = trace(&handle);
    assert_eq!((served.0.requests, served.0.hedges, served.1), (1, 1, 1));

    // `call` consumed the readiness: the next call needs a new poll.
    let again = hedge.call(request("inference"));
    not_ready("polled once, called twice", again).await;
    assert_eq!(seen.calls.load(Ordering::SeqCst), 2);
    assert_eq!(trace(&handle), served, "nothing more counted");

    // A clone starts not ready, however ready its original is.
    hedge.ready().await.unwrap();
    let polls = seen.ready_polls.load(Ordering::SeqCst);
    not_ready("a clone", hedge.clone().call(request("inference"))).await;
    assert_eq!(seen.calls.load(Ordering::SeqCst), 2);
    assert_eq!(trace(&handle), served);
    // The original stays ready until its own `call`, without polling
    // its inner service again.
    assert!(hedge.ready().await.is_ok());
    assert_eq!(seen.ready_polls.load(Ordering::SeqCst), polls);
    drop(hedge.call(request("inference")));
    assert_eq!(seen.calls.load(Ordering::SeqCst), 3);
    assert_eq!(stats(&layer).requests, 2);
}
