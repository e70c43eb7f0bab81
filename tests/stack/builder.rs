//! `ServiceBuilderModelExt`: each method puts its layer in the stack, in the
//! order written, doing what the layer does.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use tower::{service_fn, ServiceBuilder, ServiceExt};
use tower_model_balance::breaker::BreakerConfig;
use tower_model_balance::error::{BoxError, BreakerOpen, PayloadTooLarge};
use tower_model_balance::route::RouteInfo;
use tower_model_balance::ServiceBuilderModelExt;

use crate::slow_first;
use slow_first::{after_10ms, inference, slow_first, FIRST_MS, LATER_MS};

#[tokio::test]
async fn model_from_body_puts_the_body_model_in_the_extensions() {
    let seen = Arc::new(Mutex::new(None));
    let record = seen.clone();
    let stack = ServiceBuilder::new().model_from_body().service(service_fn(
        move |req: http::Request<_>| {
            let route = req.extensions().get::<RouteInfo>().cloned();
            *record.lock().unwrap() = route;
            async { Ok::<_, BoxError>(http::Response::new(())) }
        },
    ));
    let request = http::Request::post("/v1/chat/completions")
        .body(Full::new(Bytes::from_static(br#"{"model": "llama-3-8b"}"#)))
        .unwrap();
    stack.clone().oneshot(request).await.unwrap();
    let route = seen.lock().unwrap().take().expect("a RouteInfo");
    assert_eq!(route.model.as_str(), "llama-3-8b");

    // The default limit is 1 MiB: one byte more is refused.
    let big = vec![b' '; 1024 * 1024 + 1];
    let request = http::Request::post("/v1/completions")
        .body(Full::new(Bytes::from(big)))
        .unwrap();
    let error = stack.oneshot(request).await.unwrap_err();
    assert!(error.is::<PayloadTooLarge>(), "{error}");
}

#[tokio::test(start_paused = true)]
async fn circuit_breaker_opens_on_failures_and_fails_fast() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let policy = BreakerConfig::builder()
        .window(4)
        .minimum_calls(4)
        .failure_rate_threshold(0.5)
        .jitter(false)
        .build()
        .unwrap();
    let stack = ServiceBuilder::new()
        .circuit_breaker(policy)
        .service(service_fn(move |_req: http::Request<()>| {
            counted.fetch_add(1, Ordering::SeqCst);
            async {
                Ok::<_, BoxError>(
                    http::Response::builder()
                        .status(503)
                        .body(String::new())
                        .unwrap(),
                )
            }
        }));
    for _ in 0..4 {
        let response = stack.clone().oneshot(http::Request::new(())).await.unwrap();
        assert_eq!(response.status(), 503);
    }
    let error = stack.oneshot(http::Request::new(())).await.unwrap_err();
    assert!(error.is::<BreakerOpen>(), "{error}");
    assert_eq!(calls.load(Ordering::SeqCst), 4, "the fifth call never left");
}

#[tokio::test(start_paused = true)]
async fn hedge_sends_a_backup_after_the_delay_unless_the_gate_is_closed() {
    let policy = after_10ms()
        .budget_ratio(1.0)
        .max_utilization(0.8)
        .build()
        .unwrap();
    for (utilization, attempts, took) in [(0.5, 2, LATER_MS), (0.9, 1, FIRST_MS)] {
        let (backend, calls) = slow_first();
        let stack = ServiceBuilder::new()
            .hedge(policy.clone(), move || utilization)
            .service(backend);
        let response = stack.oneshot(inference()).await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), attempts, "at {utilization}");
        assert_eq!(*response.body(), took, "at {utilization}");
    }
}

#[tokio::test(start_paused = true)]
async fn layers_stack_in_the_order_written() {
    // The breaker is outside the timeout: a hung call times out, and the
    // breaker counts the timeout as a failure.
    let policy = BreakerConfig::builder()
        .window(2)
        .minimum_calls(2)
        .failure_rate_threshold(1.0)
        .jitter(false)
        .build()
        .unwrap();
    let stack = ServiceBuilder::new()
        .circuit_breaker(policy)
        .timeout(Duration::from_secs(1))
        .service(service_fn(|_req: http::Request<()>| async {
            std::future::pending::<()>().await;
            Ok::<_, BoxError>(http::Response::new(String::new()))
        }));
    for _ in 0..2 {
        let error = stack
            .clone()
            .oneshot(http::Request::new(()))
            .await
            .unwrap_err();
        assert!(error.is::<tower::timeout::error::Elapsed>(), "{error}");
    }
    let error = stack.oneshot(http::Request::new(())).await.unwrap_err();
    assert!(error.is::<BreakerOpen>(), "{error}");
}
