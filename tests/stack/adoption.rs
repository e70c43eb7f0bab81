//! What a new user meets first: a call without readiness, a constructor
//! outside a runtime, a response with no streaming body.

use std::time::Duration;

use bytes::Bytes;
use tower::discover::ServiceList;
use tower::{service_fn, Layer, Service, ServiceExt};
use tower_model_balance::backend::{Backend, BackendId};
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
use tower_model_balance::breaker::{BreakerConfig, CircuitBreakerLayer, WhenOpen};
use tower_model_balance::classify::Classifier;
use tower_model_balance::error::{BreakerOpen, NoRuntime, NotReady};
use tower_model_balance::health::probe::{KServeV2, ProbeConfig};
use tower_model_balance::placement::{KServeV2Loader, PlacementConfig};

type Reply = http::Response<Bytes>;

/// A backend answering `code` with a `Bytes` body, counting its calls.
fn bytes_backend(
    code: u16,
    calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> impl Service<http::Request<()>, Response = Reply, Error = std::io::Error, Future: Send> + Clone
{
    service_fn(move |_req: http::Request<()>| {
        calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async move {
            let rsp = http::Response::builder().status(code);
            Ok::<_, std::io::Error>(rsp.body(Bytes::from_static(b"done")).expect("a response"))
        }
    })
}

#[tokio::test]
async fn a_call_without_poll_ready_is_not_ready_and_never_reaches_the_service() {
    for when_open in [WhenOpen::FailFast, WhenOpen::Backpressure] {
        let calls = std::sync::Arc::default();
        let mut breaker = CircuitBreakerLayer::new(BreakerConfig::default())
            .when_open(when_open)
            .at_response()
            .layer(bytes_backend(200, std::sync::Arc::clone(&calls)));
        let error = breaker
            .call(http::Request::new(()))
            .await
            .expect_err("not ready");
        assert!(error.is::<NotReady>(), "{when_open:?}: {error}");
        assert!(!error.is::<BreakerOpen>());
        assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert_eq!(breaker.breaker().stats().calls, 0, "nothing counted");
        // Driven ready, the same service calls through.
        let rsp = breaker
            .ready()
            .await
            .expect("ready")
            .call(http::Request::new(()));
        assert_eq!(rsp.await.expect("served").body(), "done");
    }
}

#[tokio::test(start_paused = true)]
async fn a_breaker_at_the_response_trips_on_bytes_bodies_and_returns_them_unchanged() {
    let calls = std::sync::Arc::default();
    let config = BreakerConfig::builder()
        .window(4)
        .minimum_calls(4)
        .open_duration(Duration::from_secs(5))
        .build()
        .expect("a valid config");
    let breaker = CircuitBreakerLayer::new(config)
        .at_response()
        .layer(bytes_backend(503, std::sync::Arc::clone(&calls)));
    for _ in 0..4 {
        let rsp: Reply = breaker
            .clone()
            .oneshot(http::Request::new(()))
            .await
            .expect("a 503");
        assert_eq!(rsp.status(), 503);
    }
    let error = breaker
        .clone()
        .oneshot(http::Request::new(()))
        .await
        .expect_err("open");
    assert!(error.is::<BreakerOpen>(), "{error}");
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 4);
}

#[tokio::test]
async fn the_balancer_at_the_response_serves_bytes_bodies_and_records_at_once() {
    let calls = std::sync::Arc::default();
    let backend = Backend::new(
        BackendId::new("gpu-0").expect("an ID"),
        bytes_backend(200, std::sync::Arc::clone(&calls)),
    );
    let balancer = ModelBalancer::new(ServiceList::new([backend]), BalanceConfig::default())
        .expect("inside a runtime")
        .at_response(Classifier::http());
    let req = http::Request::builder()
        .header("x-model-id", "llama")
        .body(())
        .expect("a request");
    let rsp: Reply = balancer.clone().oneshot(req).await.expect("served");
    assert_eq!(rsp.body(), "done");
    let handle = balancer.handle();
    assert_eq!(handle.in_flight(), 0, "out of flight when it arrived");
    // Recorded, not cancelled: a cancelled request counts no call.
    let gpu = BackendId::new("gpu-0").expect("an ID");
    let metrics = handle.breaker(&gpu).expect("known").stats();
    assert_eq!(
        (metrics.calls, metrics.failures),
        (1, 0),
        "one success recorded"
    );
    let bad = http::Request::new(());
    assert!(
        balancer.oneshot(bad).await.is_err(),
        "no model: a typed error"
    );
}

#[test]
fn every_constructor_that_spawns_fails_outside_a_runtime_with_no_runtime() {
    let gpu = || {
        let endpoint = service_fn(|_req: http::Request<()>| async {
            Ok::<_, std::io::Error>(http::Response::new(String::new()))
        });
        Backend::new(BackendId::new("gpu-0").expect("an ID"), endpoint)
    };
    // An ended source and a live one alike.
    let ended = ModelBalancer::new(ServiceList::new([gpu()]), BalanceConfig::default());
    let error = ended.map(drop).expect_err("no runtime");
    assert!(error.is::<NoRuntime>(), "{error}");
    let (_tx, rx) = tokio::sync::watch::channel(vec![gpu()]);
    let live = tower_model_balance::discover::Watch::new(rx);
    let live = ModelBalancer::new(live, BalanceConfig::default());
    let error = live.map(drop).expect_err("no runtime");
    assert!(error.is::<NoRuntime>(), "{error}");

    // Built inside one, then asked for tasks outside it.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let balancer = runtime
        .block_on(async { ModelBalancer::new(ServiceList::new([gpu()]), BalanceConfig::default()) })
        .expect("inside a runtime");
    let handle = balancer.handle();
    let probes = handle.spawn_probes(KServeV2::default(), ProbeConfig::default());
    assert_eq!(
        probes.map(drop).expect_err("no runtime"),
        NoRuntime::default()
    );
    let placement = handle.enable_placement(KServeV2Loader::default(), PlacementConfig::default());
    let error = placement.map(drop).expect_err("no runtime");
    assert!(error.is::<NoRuntime>(), "{error}");
    let export = tower_model_balance::metrics::export(handle.clone(), Duration::from_secs(1));
    assert_eq!(
        export.map(drop).expect_err("no runtime"),
        NoRuntime::default()
    );
    // Nothing was started: placement can still be turned on, in a runtime.
    let _guard = runtime.enter();
    let placement = handle.enable_placement(KServeV2Loader::default(), PlacementConfig::default());
    assert!(placement.is_ok());
}
