//! The balancer's answer to a `call` made without `poll_ready`, as every
//! layer of the crate answers it (the crate docs' "Readiness"):
//! `NotReady`, nothing routed, sent or counted; readiness consumed by
//! `call` and never cloned.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tower::discover::ServiceList;
use tower::{service_fn, Service, ServiceExt};
use tower_model_balance::backend::{Backend, BackendId};
use tower_model_balance::balance::{BalanceConfig, BalanceStats, BalancerHandle, ModelBalancer};
use tower_model_balance::error::{BoxError, NotReady};

fn infer() -> http::Request<String> {
    http::Request::post("/infer")
        .header("x-model-id", "llama")
        .body(String::new())
        .unwrap()
}

/// `future`'s error, which must be `NotReady`.
async fn not_ready<T>(what: &str, future: impl std::future::Future<Output = Result<T, BoxError>>) {
    let Err(error) = future.await else {
        panic!("{what}: served a call made without `poll_ready`");
    };
    assert!(error.is::<NotReady>(), "{error}");
}

/// What a call may leave behind: the counters, the in-flight count and
/// the picks.
fn trace(handle: &BalancerHandle) -> (BalanceStats, usize, u64) {
    let picked = handle.backends().iter().map(|b| b.picked).sum();
    (handle.stats(), handle.in_flight(), picked)
}

#[tokio::test(start_paused = true)]
async fn a_call_without_poll_ready_is_not_ready_and_routes_nothing() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let endpoint = service_fn(move |_req: http::Request<String>| {
        counted.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, Infallible>(http::Response::new(String::from("ok"))) }
    });
    let backends = ServiceList::new([Backend::new(BackendId::new("gpu-0").unwrap(), endpoint)]);
    let mut balancer = ModelBalancer::new(backends, BalanceConfig::default()).unwrap();
    let handle = balancer.handle();
    let fresh = trace(&handle);

    // Never polled ready: refused in `call`, before any pick.
    let refused = balancer.call(infer());
    assert_eq!(trace(&handle), fresh, "nothing picked, counted, in flight");
    not_ready("never polled", refused).await;
    assert_eq!(calls.load(Ordering::SeqCst), 0, "the endpoint never called");
    assert_eq!(trace(&handle), fresh);

    // Polled ready, the same clone routes.
    let response = balancer.ready().await.unwrap().call(infer()).await;
    drop(response.expect("served"));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let served = trace(&handle);
    assert_eq!((served.1, served.2), (0, 1), "one pick, ended");

    // `call` consumed the readiness: the next call needs a new poll.
    not_ready("polled once, called twice", balancer.call(infer())).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(trace(&handle), served, "nothing more counted");

    // A clone starts not ready, however ready its original is.
    balancer.ready().await.unwrap();
    let mut clone = balancer.clone();
    not_ready("a clone", clone.call(infer())).await;
    assert_eq!(trace(&handle), served);
    // The original stays ready until its own `call`.
    drop(balancer.call(infer()).await.expect("served"));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(handle.in_flight(), 0);
}
