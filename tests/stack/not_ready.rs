//! The pass-throughs' answer to a `call` made without `poll_ready` (the
//! crate docs' "Readiness"): they keep no readiness of their own and
//! forward, so over a layer of the crate the answer is that layer's —
//! `NotReady`, the backend not called — and readiness is consumed by
//! `call` and never cloned, as the layer below keeps it.

use std::convert::Infallible;
use std::future::{ready, Ready};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::Full;
use tower::{Layer, Service, ServiceExt};
use tower_model_balance::backend::{Backend, BackendId};
use tower_model_balance::breaker::{BreakerConfig, CircuitBreaker, CircuitBreakerLayer};
use tower_model_balance::classify::{AtResponse, ServerErrorsAsFailures};
use tower_model_balance::endpoint::SetOrigin;
use tower_model_balance::error::{BoxError, NotReady};
use tower_model_balance::hedge::{BufferRequestBodyLayer, FirstFrameLayer};
use tower_model_balance::route::ModelFromBodyLayer;

type Req = http::Request<Full<Bytes>>;
type Rsp = http::Response<Full<Bytes>>;

/// A backend that counts its calls.
#[derive(Clone)]
struct Counted(Arc<AtomicUsize>);

impl Service<Req> for Counted {
    type Response = Rsp;
    type Error = Infallible;
    type Future = Ready<Result<Rsp, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Req) -> Self::Future {
        self.0.fetch_add(1, Ordering::SeqCst);
        ready(Ok(http::Response::new(Full::new(Bytes::from_static(
            b"ok",
        )))))
    }
}

type Guarded = CircuitBreaker<Counted, ServerErrorsAsFailures, AtResponse>;

/// A breaker (a layer with readiness of its own) over a counted backend.
fn guarded(calls: &Arc<AtomicUsize>) -> Guarded {
    CircuitBreakerLayer::new(BreakerConfig::default())
        .at_response()
        .layer(Counted(calls.clone()))
}

fn request() -> Req {
    http::Request::post("/v1/completions")
        .header("x-model-id", "llama")
        .body(Full::new(Bytes::from_static(b"{}")))
        .unwrap()
}

/// `svc`, a pass-through over [`guarded`], answers as the crate's layers
/// do; `calls` counts the backend's calls.
async fn answers_as_the_layer_below<S>(name: &str, mut svc: S, calls: &AtomicUsize)
where
    S: Service<Req, Error = BoxError> + Clone,
{
    let not_ready = |step: &str, result: Result<S::Response, BoxError>| {
        let Err(error) = result else {
            panic!("{name}, {step}: served a call made without `poll_ready`");
        };
        assert!(error.is::<NotReady>(), "{name}, {step}: {error}");
    };
    not_ready("never polled", svc.call(request()).await);
    assert_eq!(calls.load(Ordering::SeqCst), 0, "{name}");

    let served = svc.ready().await.unwrap().call(request()).await;
    assert!(served.is_ok(), "{name}: polled ready, served");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "{name}");

    not_ready("polled once, called twice", svc.call(request()).await);
    svc.ready().await.unwrap();
    not_ready("a clone", svc.clone().call(request()).await);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "{name}");
    assert!(svc.call(request()).await.is_ok(), "{name}: still ready");
    assert_eq!(calls.load(Ordering::SeqCst), 2, "{name}");
}

#[tokio::test]
async fn the_pass_throughs_answer_a_call_before_readiness_as_the_layer_below() {
    let calls = Arc::new(AtomicUsize::new(0));
    let svc = ModelFromBodyLayer::new().layer(guarded(&calls));
    answers_as_the_layer_below("ModelFromBody", svc, &calls).await;

    let calls = Arc::new(AtomicUsize::new(0));
    let svc = BufferRequestBodyLayer::new(1 << 10).layer(guarded(&calls));
    answers_as_the_layer_below("BufferRequestBody", svc, &calls).await;

    let calls = Arc::new(AtomicUsize::new(0));
    let svc = FirstFrameLayer::new().layer(guarded(&calls));
    answers_as_the_layer_below("FirstFrame", svc, &calls).await;

    let calls = Arc::new(AtomicUsize::new(0));
    let svc = SetOrigin::new(guarded(&calls), "http://127.0.0.1:8000").unwrap();
    answers_as_the_layer_below("SetOrigin", svc, &calls).await;

    let calls = Arc::new(AtomicUsize::new(0));
    let svc = Backend::new(BackendId::new("gpu-0").unwrap(), guarded(&calls));
    answers_as_the_layer_below("Backend", svc, &calls).await;
}
