//! Retries that draw from the hedge's budget: only where a retry is safe
//! (a connection refused, a 503 with a short `Retry-After`, a 404 from a
//! backend to another), at most once
//! by default, and never past the budget hedges share.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tower::retry::Retry;
use tower::{service_fn, Layer, ServiceExt};
use tower_model_balance::backend::{BackendId, PickedSlot};
use tower_model_balance::error::BoxError;
use tower_model_balance::hedge::{HedgeConfig, HedgeLayer, RetryPolicy};

type Rsp = http::Response<()>;

/// What one attempt answers.
#[derive(Clone, Debug)]
enum Answer {
    Status(u16, Option<&'static str>),
    Io(std::io::ErrorKind),
    /// A kept-alive connection the server closed before answering, as
    /// hyper-util's client reports it.
    Closed,
}

/// A service answering attempt `i` with `answers[i]` (the last repeats),
/// counting its calls.
fn scripted(
    answers: Vec<Answer>,
) -> (
    impl tower::Service<http::Request<()>, Response = Rsp, Error = BoxError, Future = impl Send> + Clone,
    Arc<AtomicUsize>,
) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let answers = Arc::new(Mutex::new(answers));
    let service = service_fn(move |_req: http::Request<()>| {
        let i = counted.fetch_add(1, Ordering::SeqCst);
        let answers = answers.lock().unwrap();
        let answer = answers[i.min(answers.len() - 1)].clone();
        async move {
            match answer {
                Answer::Status(code, retry_after) => {
                    let mut rsp = http::Response::builder().status(code);
                    if let Some(after) = retry_after {
                        rsp = rsp.header("retry-after", after);
                    }
                    Ok(rsp.body(())?)
                }
                Answer::Closed => Err(BoxError::from(SendRequest(ClosedEarly))),
                Answer::Io(kind) => {
                    // As a client reports it: the I/O error as the source.
                    let io = std::io::Error::new(kind, "connect");
                    Err(BoxError::from(Wrapped(io)))
                }
            }
        }
    });
    (service, calls)
}

/// An error whose source is the I/O error, as hyper-util's client wraps it.
#[derive(Debug)]
struct Wrapped(std::io::Error);

impl std::fmt::Display for Wrapped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("client error (Connect)")
    }
}

impl std::error::Error for Wrapped {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// hyper-util's `client error (SendRequest)` over hyper's
/// `IncompleteMessage`.
#[derive(Debug)]
struct SendRequest(ClosedEarly);

#[derive(Debug)]
struct ClosedEarly;

impl std::fmt::Display for SendRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("client error (SendRequest)")
    }
}

impl std::error::Error for SendRequest {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

impl std::fmt::Display for ClosedEarly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection closed before message completed")
    }
}

impl std::error::Error for ClosedEarly {}

async fn send(policy: RetryPolicy, answers: Vec<Answer>) -> (Result<Rsp, BoxError>, usize) {
    let (service, calls) = scripted(answers);
    let result = Retry::new(policy, service)
        .oneshot(http::Request::new(()))
        .await;
    (result, calls.load(Ordering::SeqCst))
}

fn generous() -> RetryPolicy {
    RetryPolicy::new(1.0, Duration::from_secs(10))
}

#[tokio::test(start_paused = true)]
async fn a_refused_connection_is_retried_once() {
    let refused = Answer::Io(std::io::ErrorKind::ConnectionRefused);
    let (result, calls) = send(generous(), vec![refused.clone(), Answer::Status(200, None)]).await;
    assert_eq!(result.unwrap().status(), 200);
    assert_eq!(calls, 2);
    // Refused twice: one retry only, the second error returned.
    let (result, calls) = send(generous(), vec![refused]).await;
    assert!(result.is_err());
    assert_eq!(calls, 2);
}

#[tokio::test(start_paused = true)]
async fn a_connection_closed_before_any_answer_is_retried_unless_an_update() {
    // MLServer (uvicorn) closes a kept-alive connection after a 500
    // without saying so; the next request sent on it is never answered.
    let (result, calls) = send(generous(), vec![Answer::Closed, Answer::Status(200, None)]).await;
    assert_eq!(result.unwrap().status(), 200, "inference: retried");
    assert_eq!(calls, 2);
    // An update may have been applied: not retried.
    let (service, calls) = scripted(vec![Answer::Closed, Answer::Status(200, None)]);
    let update = http::Request::builder()
        .header("x-model-id", "m")
        .header("x-request-kind", "update")
        .body(())
        .unwrap();
    let result = Retry::new(generous(), service).oneshot(update).await;
    assert!(result.is_err(), "update: returned as it is");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_reset_is_retried_for_inference_not_for_an_update() {
    let reset = Answer::Io(std::io::ErrorKind::ConnectionReset);
    let (result, calls) = send(generous(), vec![reset.clone(), Answer::Status(200, None)]).await;
    assert_eq!(result.unwrap().status(), 200);
    assert_eq!(calls, 2);
    let (service, calls) = scripted(vec![reset, Answer::Status(200, None)]);
    let update = http::Request::builder()
        .header("x-model-id", "m")
        .header("x-request-kind", "update")
        .body(())
        .unwrap();
    assert!(Retry::new(generous(), service)
        .oneshot(update)
        .await
        .is_err());
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "an update may have been applied"
    );
}

#[tokio::test(start_paused = true)]
async fn a_503_with_retry_after_is_retried_after_the_wait() {
    let start = Instant::now();
    let (result, calls) = send(
        generous(),
        vec![Answer::Status(503, Some("1")), Answer::Status(200, None)],
    )
    .await;
    assert_eq!(result.unwrap().status(), 200);
    assert_eq!(calls, 2);
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn other_answers_are_returned_as_they_are() {
    let ok = Answer::Status(200, None);
    for first in [
        Answer::Status(503, None),
        Answer::Status(503, Some("5")),
        Answer::Status(503, Some("Wed, 21 Oct 2015 07:28:00 GMT")),
        Answer::Status(500, Some("0")),
        Answer::Status(429, Some("0")),
        // Not known to have gone to a backend: nowhere else to send it.
        Answer::Status(404, None),
    ] {
        let (result, calls) = send(generous(), vec![first.clone(), ok.clone()]).await;
        assert_ne!(result.unwrap().status(), 200, "{first:?}");
        assert_eq!(calls, 1, "{first:?}");
    }
}

/// A request whose attempt the balancer recorded as sent to `gpu-0`,
/// as a hedge's slot carries it; `kind`: its `x-request-kind`.
fn picked(kind: &str) -> http::Request<()> {
    let slot = PickedSlot::new();
    slot.set(&BackendId::new("gpu-0").unwrap());
    let mut req = http::Request::builder()
        .header("x-model-id", "m")
        .header("x-request-kind", kind)
        .body(())
        .unwrap();
    req.extensions_mut().insert(slot);
    req
}

#[tokio::test(start_paused = true)]
async fn a_404_from_a_known_backend_is_retried_elsewhere_unless_an_update() {
    // A server restarted empty answers 404 for a model the balancer still
    // believed there: the retry goes at once to another backend.
    let (service, calls) = scripted(vec![Answer::Status(404, None), Answer::Status(200, None)]);
    let result = Retry::new(generous(), service)
        .oneshot(picked("inference"))
        .await;
    assert_eq!(result.unwrap().status(), 200, "inference: retried");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // Once: a model nobody serves gets the second backend's 404.
    let (service, calls) = scripted(vec![Answer::Status(404, None)]);
    let result = Retry::new(generous(), service)
        .oneshot(picked("inference"))
        .await;
    assert_eq!(result.unwrap().status(), 404);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // An update is never sent twice.
    let (service, calls) = scripted(vec![Answer::Status(404, None), Answer::Status(200, None)]);
    let result = Retry::new(generous(), service)
        .oneshot(picked("update"))
        .await;
    assert_eq!(result.unwrap().status(), 404, "update: returned as it is");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn a_404s_retry_draws_from_the_budget_like_any_other() {
    // A 404 may be a version or a route that exists nowhere (issue 51): a
    // client asking for one must not double its calls for free.
    let policy = generous();
    let (service, calls) = scripted(vec![Answer::Status(404, None), Answer::Status(200, None)]);
    let result = Retry::new(policy.clone(), service)
        .oneshot(picked("inference"))
        .await;
    assert_eq!(result.unwrap().status(), 200);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(policy.budget().granted(), 1, "one retry drawn");
    // With no budget left, the 404 is returned as it is.
    let spent = RetryPolicy::new(0.0, Duration::from_secs(10));
    let (service, calls) = scripted(vec![Answer::Status(404, None), Answer::Status(200, None)]);
    let result = Retry::new(spent.clone(), service)
        .oneshot(picked("inference"))
        .await;
    assert_eq!(result.unwrap().status(), 404, "not retried");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!((spent.budget().granted(), spent.budget().refused()), (0, 1));
    // A 404 for a version: every backend lacks it; not retried.
    let policy = generous();
    let (service, calls) = scripted(vec![Answer::Status(404, None), Answer::Status(200, None)]);
    let mut req = picked("inference");
    *req.uri_mut() = "/v2/models/m/versions/3/infer".parse().unwrap();
    let result = Retry::new(policy.clone(), service).oneshot(req).await;
    assert_eq!(result.unwrap().status(), 404, "a missing version");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(policy.budget().granted(), 0);
}

#[tokio::test(start_paused = true)]
async fn retries_stop_when_the_budget_is_spent() {
    // 10% of requests: 10 requests allow one retry.
    let policy = RetryPolicy::new(0.1, Duration::from_secs(10));
    let busy = vec![Answer::Status(503, Some("0")), Answer::Status(200, None)];
    let mut retried = 0;
    for _ in 0..10 {
        let (_, calls) = send(policy.clone(), busy.clone()).await;
        retried += calls - 1;
    }
    assert_eq!(retried, 1);
    assert_eq!(
        (policy.budget().granted(), policy.budget().refused()),
        (1, 9)
    );
}

#[tokio::test(start_paused = true)]
async fn hedges_and_retries_share_one_budget() {
    // Half an extra attempt per request; the layer counts the requests.
    let hedge_policy = HedgeConfig::builder()
        .min_samples(0)
        .floor(Duration::from_millis(10))
        .ceiling(Duration::from_millis(10))
        .budget_ratio(0.5)
        .budget_min_per_sec(0)
        .build()
        .unwrap();
    let layer = HedgeLayer::new(hedge_policy);
    let slow = service_fn(|_req: http::Request<()>| async {
        tokio::time::sleep(Duration::from_millis(30)).await;
        Ok::<_, BoxError>(http::Response::new(()))
    });
    let hedged = layer.layer(slow);
    // Two requests: one hedge (1 ≤ 0.5 × 2), the other suppressed.
    for _ in 0..2 {
        hedged
            .clone()
            .oneshot(http::Request::new(()))
            .await
            .unwrap();
    }
    let stats = layer.handle().stats();
    assert_eq!((stats.hedges, stats.suppressed_by_budget), (1, 1));
    // The budget is spent: the retry policy drawing from it does not retry.
    let busy = vec![Answer::Status(503, Some("0")), Answer::Status(200, None)];
    let (result, calls) = send(layer.retry_policy(), busy.clone()).await;
    assert_eq!(result.unwrap().status(), 503);
    assert_eq!(calls, 1, "no room left for a retry");
    // Two more requests through the layer make room for one more extra
    // attempt: the retry takes it (the retry policy counted no request).
    for _ in 0..2 {
        let fast = service_fn(|_req: http::Request<()>| async {
            Ok::<_, BoxError>(http::Response::new(()))
        });
        layer
            .layer(fast)
            .oneshot(http::Request::new(()))
            .await
            .unwrap();
    }
    let (result, calls) = send(layer.retry_policy(), busy).await;
    assert_eq!(result.unwrap().status(), 200);
    assert_eq!(calls, 2);
    assert_eq!(layer.handle().budget().granted(), 2);
}
