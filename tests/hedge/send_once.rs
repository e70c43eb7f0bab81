//! A request marked `SendOnce` (a call that stores its answer): never
//! hedged, not even after a fast failure, and retried only when its
//! connection was refused — it is timed as its model's all the same.

use crate::hedge_script;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tower::retry::Retry;
use tower::{service_fn, Layer, ServiceExt};
use tower_model_balance::backend::{BackendId, PickedSlot};
use tower_model_balance::error::BoxError;
use tower_model_balance::hedge::{HedgeLayer, RetryPolicy};
use tower_model_balance::route::{ModelId, SendOnce};

use hedge_script::{error_after, never, ok_after, policy, request, stats, Script};

/// `request("inference")` marked `SendOnce`.
fn once() -> hedge_script::Req {
    let mut req = request("inference");
    req.extensions_mut().insert(SendOnce);
    req
}

#[tokio::test(start_paused = true)]
async fn a_request_marked_send_once_is_never_hedged() {
    let layer = HedgeLayer::new(policy().build().unwrap());
    // Slow: past the 10 ms delay, a backup would have gone.
    let (script, seen) = Script::new(vec![ok_after(40), ok_after(1)]);
    let answer = layer.layer(script).oneshot(once()).await.unwrap();
    assert_eq!(*answer.body(), "0");
    assert_eq!(seen.calls.load(Ordering::SeqCst), 1);
    // A fast failure sends no backup either.
    let (script, seen) = Script::new(vec![error_after(1), ok_after(1)]);
    assert!(layer.layer(script).oneshot(once()).await.is_err());
    assert_eq!(seen.calls.load(Ordering::SeqCst), 1);
    let s = stats(&layer);
    assert_eq!((s.requests, s.hedges, s.send_once), (2, 0, 2));
    // The same request unmarked is hedged.
    let (script, seen) = Script::new(vec![never(), ok_after(1)]);
    let answer = layer.layer(script).oneshot(request("inference")).await;
    assert_eq!(*answer.unwrap().body(), "1");
    assert_eq!(seen.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_send_once_request_feeds_its_models_delay() {
    let layer = HedgeLayer::new(
        policy()
            .min_samples(3)
            .floor(Duration::from_millis(1))
            .ceiling(Duration::from_secs(1))
            .build()
            .unwrap(),
    );
    for _ in 0..3 {
        let (script, _) = Script::new(vec![ok_after(20)]);
        layer.layer(script).oneshot(once()).await.unwrap();
    }
    let model = ModelId::new("llama").unwrap();
    assert!(layer.handle().delay(&model).is_some(), "3 samples timed");
}

/// What a scripted attempt gives back.
type Answer = fn() -> Result<http::Response<()>, BoxError>;

/// A service answering every call with `answer`, counting its calls.
fn answering(
    answer: Answer,
) -> (
    impl tower::Service<
            http::Request<()>,
            Response = http::Response<()>,
            Error = BoxError,
            Future = impl Send,
        > + Clone,
    Arc<AtomicUsize>,
) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let service = service_fn(move |_req: http::Request<()>| {
        counted.fetch_add(1, Ordering::SeqCst);
        async move { answer() }
    });
    (service, calls)
}

/// A send-once request whose attempt the balancer recorded as sent to
/// `gpu-0` (so a 503 or a 404 would be retried elsewhere at once).
fn picked_once() -> http::Request<()> {
    let mut req = once();
    let slot = PickedSlot::new();
    slot.set(&BackendId::new("gpu-0").unwrap());
    req.extensions_mut().insert(slot);
    req
}

fn status(code: u16) -> Result<http::Response<()>, BoxError> {
    Ok(http::Response::builder().status(code).body(())?)
}

fn io(kind: std::io::ErrorKind) -> Result<http::Response<()>, BoxError> {
    Err(BoxError::from(std::io::Error::new(kind, "connect")))
}

#[tokio::test(start_paused = true)]
async fn a_send_once_request_is_retried_only_when_its_connection_was_refused() {
    let generous = || RetryPolicy::new(1.0, Duration::from_secs(10));
    let answers: [Answer; 4] = [
        || status(503),
        || status(404),
        || io(std::io::ErrorKind::ConnectionReset),
        || io(std::io::ErrorKind::ConnectionRefused),
    ];
    let mut calls_seen = Vec::new();
    for answer in answers {
        let (service, calls) = answering(answer);
        let _ = Retry::new(generous(), service).oneshot(picked_once()).await;
        calls_seen.push(calls.load(Ordering::SeqCst));
    }
    assert_eq!(calls_seen, [1, 1, 1, 2], "503, 404, reset, refused");
    // Unmarked, the 503, the 404 and the reset are retried too.
    let (service, calls) = answering(|| status(503));
    let mut req = request("inference");
    let slot = PickedSlot::new();
    slot.set(&BackendId::new("gpu-0").unwrap());
    req.extensions_mut().insert(slot);
    let _ = Retry::new(generous(), service).oneshot(req).await;
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}
