//! The model-aware balancer over mock endpoints: typed fast failures,
//! in-flight accounting to the end of the body, breakers, discovery, P2C.

use crate::balancer_fleet;
use crate::held;
use crate::lcg;
use crate::until;

use http_body_util::BodyExt;
use tower::discover::{Change, ServiceList};
use tower::ServiceExt;
use tower_model_balance::backend::{Backend, BackendId};
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
use tower_model_balance::breaker::{BreakerConfig, BreakerState};
use tower_model_balance::classify::{Classifier, Outcome, ServerErrorsAsFailures};
use tower_model_balance::error::{InvalidRoute, NoHealthyBackend};
use tower_model_balance::ring::RingConfig;
use tower_model_balance::route::ModelId;

use balancer_fleet::{
    channel_discover, config, expect_err, fleet, infer, trips_after_3_of_4, update,
};
use held::Mock;
use lcg::Lcg;
use until::until;

#[tokio::test(start_paused = true)]
async fn no_backend_fails_fast_naming_the_model() {
    let balancer = ModelBalancer::new(
        ServiceList::new(Vec::<Backend<Mock>>::new()),
        BalanceConfig::default(),
    )
    .unwrap();
    let err = expect_err(balancer.clone().oneshot(infer("llama")).await);
    let err = err
        .downcast_ref::<NoHealthyBackend>()
        .expect("NoHealthyBackend");
    assert_eq!(err.model.as_str(), "llama");
    assert_eq!(balancer.handle().stats().no_backend, 1);
}

#[tokio::test(start_paused = true)]
async fn invalid_route_is_typed_and_sends_nothing() {
    let f = fleet(2);
    let balancer = f.balancer(BalanceConfig::default());
    let missing = http::Request::post("/").body(String::new()).unwrap();
    let err = expect_err(balancer.clone().oneshot(missing).await);
    assert_eq!(
        err.downcast_ref::<InvalidRoute>()
            .expect("InvalidRoute")
            .source,
        "x-model-id"
    );
    let err = expect_err(balancer.clone().oneshot(infer("has space")).await);
    assert!(err.is::<InvalidRoute>());
    assert_eq!(f.served("a") + f.served("b"), 0);
    assert_eq!(balancer.handle().stats().invalid_route, 2);
}

#[tokio::test(start_paused = true)]
async fn in_flight_lasts_until_the_end_of_the_body_or_its_drop() {
    let f = fleet(2);
    let balancer = f.balancer(BalanceConfig::default());
    let handle = balancer.handle();
    let kept = balancer.clone().oneshot(infer("m")).await.unwrap();
    let dropped = balancer.clone().oneshot(infer("m")).await.unwrap();
    assert_eq!(handle.in_flight(), 2, "headers arrived, bodies still open");
    drop(dropped);
    assert_eq!(handle.in_flight(), 1, "a dropped body ends the request");
    f.close_bodies();
    let bytes = kept.into_body().collect().await.unwrap().to_bytes();
    assert!(bytes.is_empty());
    assert_eq!(
        handle.in_flight(),
        0,
        "the end of the body ends the request"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failing_owner_trips_and_traffic_moves_to_the_next() {
    let f = fleet(4);
    let walk = f.walk("resnet");
    let primary = f.mocks.iter().find(|m| m.name == walk[0]).unwrap();
    primary.set_status(503);
    let balancer = f.balancer(trips_after_3_of_4());
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let rsp = balancer.clone().oneshot(infer("resnet")).await.unwrap();
        f.close_bodies();
        statuses.push(rsp.status().as_u16());
        rsp.into_body().collect().await.unwrap();
    }
    assert_eq!(statuses, [503, 503, 503, 200, 200, 200]);
    assert_eq!(f.served(walk[0]), 3);
    assert_eq!(f.served(walk[1]), 3, "the next owner took over");
    let handle = balancer.handle();
    let status = handle
        .backends()
        .into_iter()
        .find(|b| b.id.as_str() == walk[0])
        .unwrap();
    assert_eq!(status.breaker, BreakerState::Open);
    assert_eq!(handle.stats().breaker_trips, 1);
}

#[tokio::test(start_paused = true)]
async fn discovery_changes_apply_in_the_background() {
    let f = fleet(2);
    let (tx, changes) = channel_discover();
    let balancer = ModelBalancer::new(changes, BalanceConfig::default()).unwrap();
    let handle = balancer.handle();
    assert!(expect_err(balancer.clone().oneshot(infer("m")).await).is::<NoHealthyBackend>());
    for (key, backend) in f.names.iter().zip(f.backends()) {
        tx.send(Change::Insert(*key, backend)).unwrap();
    }
    until(|| handle.backends().len() == 2).await;
    assert_eq!(
        balancer.clone().oneshot(infer("m")).await.unwrap().status(),
        200
    );
    tx.send(Change::Remove("a")).unwrap();
    tx.send(Change::Remove("b")).unwrap();
    until(|| handle.backends().is_empty()).await;
    assert!(expect_err(balancer.clone().oneshot(infer("m")).await).is::<NoHealthyBackend>());
}

#[tokio::test(start_paused = true)]
async fn updates_spread_by_in_flight_with_p2c() {
    let f = fleet(4);
    let balancer = ModelBalancer::from_rng(
        ServiceList::new(f.backends()),
        BalanceConfig::default(),
        Lcg(7),
    )
    .unwrap();
    let mut held = Vec::new();
    for _ in 0..40 {
        held.push(balancer.clone().oneshot(update("index")).await.unwrap());
    }
    let loads: Vec<usize> = balancer
        .handle()
        .backends()
        .iter()
        .map(|b| b.in_flight)
        .collect();
    assert_eq!(loads.iter().sum::<usize>(), 40);
    let (min, max) = (*loads.iter().min().unwrap(), *loads.iter().max().unwrap());
    assert!(max - min <= 3, "P2C keeps in-flight even: {loads:?}");
    assert_eq!(balancer.handle().stats().update, 40);
}

#[tokio::test(start_paused = true)]
async fn a_hot_model_spreads_within_the_load_cap_then_stays_where_it_is_resident() {
    let f = fleet(4);
    let balancer = f.balancer(BalanceConfig::default());
    let hot = f.walk("hot");
    // Every body stays open: in-flight piles up wherever the model is sent.
    let mut held = Vec::new();
    for _ in 0..400 {
        held.push(balancer.clone().oneshot(infer("hot")).await.unwrap());
    }
    // No backend went past the cap, ceil(1.25 × 400 / 4) = 125.
    let served: Vec<usize> = hot.iter().map(|name| f.served(name)).collect();
    assert_eq!(served.iter().sum::<usize>(), 400);
    assert!(served.iter().all(|&s| s <= 126), "{served:?}");
    let stats = balancer.handle().stats();
    assert_eq!(stats.resident_owner + stats.cold_owner + stats.spill, 400);
    assert_eq!(stats.cold_owner, 1, "loaded once on its primary");
    let handle = balancer.handle();
    let model = ModelId::new("hot").unwrap();
    let resident = |name: &str| handle.is_resident(&BackendId::new(name).unwrap(), &model);
    assert!(
        hot.iter().all(|name| resident(name)),
        "resident where served"
    );
    // Once the load is gone, it goes back to a resident owner.
    drop(held);
    let before = stats.resident_owner;
    let _ = balancer.clone().oneshot(infer("hot")).await.unwrap();
    assert_eq!(balancer.handle().stats().resident_owner, before + 1);
}

#[tokio::test(start_paused = true)]
async fn failed_statuses_count_even_when_their_bodies_are_never_read() {
    let f = fleet(2);
    for m in &f.mocks {
        m.set_status(503);
    }
    let no_panic = BalanceConfig::builder()
        .breaker(balancer_fleet::trip_3_of_4())
        .panic_threshold(0.0)
        .build()
        .unwrap();
    let balancer = f.balancer(no_panic);
    for _ in 0..3 {
        let rsp = balancer.clone().oneshot(infer("m")).await.unwrap();
        assert_eq!(rsp.status(), 503);
        drop(rsp);
    }
    for _ in 0..3 {
        let rsp = balancer.clone().oneshot(infer("m")).await.unwrap();
        let _body = rsp.into_body().into_inner();
    }
    let handle = balancer.handle();
    assert_eq!(handle.stats().breaker_trips, 2, "both backends opened");
    assert_eq!(handle.in_flight(), 0);
    let err = expect_err(balancer.clone().oneshot(infer("m")).await);
    assert!(err.is::<NoHealthyBackend>());
}

/// The config's classifier decides what the backends' breakers count: a
/// 404 ("model not loaded") is the caller's to the default classifier, a
/// failure to one that says so.
#[tokio::test(start_paused = true)]
async fn the_configs_classifier_decides_what_trips_a_breaker() {
    let trips = |classifier: Classifier| async move {
        let f = fleet(2);
        for m in &f.mocks {
            m.set_status(404);
        }
        let config = BalanceConfig::builder()
            .breaker(balancer_fleet::trip_3_of_4())
            .panic_threshold(0.0)
            .classifier(classifier)
            .build()
            .unwrap();
        let balancer = f.balancer(config);
        for _ in 0..6 {
            let rsp = balancer.clone().oneshot(infer("m")).await;
            drop(rsp);
        }
        balancer.handle().stats().breaker_trips
    };
    assert_eq!(trips(Classifier::http()).await, 0, "404 ignored by default");
    let not_loaded = Classifier::from_status(|status| match status.as_u16() {
        404 => Outcome::Failure,
        _ => ServerErrorsAsFailures::classify_status(status),
    });
    assert_eq!(trips(not_loaded).await, 2, "both backends opened on 404s");
}

#[tokio::test(start_paused = true)]
async fn with_every_breaker_open_panic_mode_still_routes() {
    let f = fleet(2);
    for m in &f.mocks {
        m.set_status(503);
    }
    let balancer = f.balancer(trips_after_3_of_4());
    for _ in 0..6 {
        drop(balancer.clone().oneshot(infer("m")).await.unwrap());
    }
    let handle = balancer.handle();
    assert_eq!(handle.stats().breaker_trips, 2, "both backends opened");
    // Under the 50% panic threshold: routed anyway, breakers bypassed.
    let rsp = balancer.clone().oneshot(infer("m")).await.unwrap();
    assert_eq!(rsp.status(), 503);
    assert_eq!(handle.stats().panic, 1);
}

#[tokio::test(start_paused = true)]
async fn a_backend_too_heavy_for_the_ring_is_ignored_not_fatal() {
    use tower_model_balance::backend::BackendMeta;
    let f = fleet(2);
    let meta =
        |name: &str, weight| BackendMeta::new(BackendId::new(name).unwrap()).with_weight(weight);
    assert_eq!(meta("x", 10_001).unwrap_err().field, "weight");
    assert_eq!(meta("x", 0).unwrap_err().field, "weight");
    // 2 000 vnodes per unit of weight: weight 8 389 is just past the ring's
    // 16 Mi points on its own.
    let ring = RingConfig::new(0, 2_000).unwrap();
    let config = BalanceConfig::builder().ring(ring).build().unwrap();
    let backends = vec![
        Backend::with_meta(meta("light-a", 1).unwrap(), f.mocks[0].clone()),
        Backend::with_meta(meta("heavy", 8_389).unwrap(), f.mocks[0].clone()),
        Backend::with_meta(meta("light-b", 1).unwrap(), f.mocks[1].clone()),
    ];
    let balancer = ModelBalancer::new(ServiceList::new(backends), config).unwrap();
    let ids: Vec<String> = balancer
        .handle()
        .backends()
        .iter()
        .map(|b| b.id.to_string())
        .collect();
    assert_eq!(
        ids,
        ["light-a", "light-b"],
        "the one that does not fit is left out"
    );
    assert_eq!(balancer.handle().stats().ignored_backends, 1, "and counted");
    assert_eq!(
        balancer.clone().oneshot(infer("m")).await.unwrap().status(),
        200
    );
}

#[tokio::test(start_paused = true)]
async fn an_insert_for_a_live_key_keeps_its_breaker_and_a_remove_lets_requests_finish() {
    let f = fleet(2);
    let (tx, changes) = channel_discover();
    let policy = BreakerConfig::builder()
        .window(2)
        .minimum_calls(2)
        .build()
        .unwrap();
    let balancer = ModelBalancer::new(changes, config(policy)).unwrap();
    let handle = balancer.handle();
    let breaker_of = |name: &str| {
        handle
            .backends()
            .into_iter()
            .find(|b| b.id.as_str() == name)
            .map(|b| b.breaker)
    };
    let mut backends = f.backends().into_iter();
    let (a, b) = (backends.next().unwrap(), backends.next().unwrap());
    tx.send(Change::Insert("a", a.clone())).unwrap();
    until(|| handle.backends().len() == 1).await;
    f.mocks[0].set_status(503);
    for _ in 0..2 {
        drop(balancer.clone().oneshot(infer("m")).await.unwrap());
    }
    assert_eq!(breaker_of("a"), Some(BreakerState::Open));
    // The same key again, with an endpoint that now answers 200: metadata and
    // endpoint are updated, the breaker (still open) is kept.
    f.mocks[0].set_status(200);
    tx.send(Change::Insert("a", a)).unwrap();
    tx.send(Change::Insert("b", b)).unwrap();
    until(|| handle.backends().len() == 2).await;
    assert_eq!(
        breaker_of("a"),
        Some(BreakerState::Open),
        "an update keeps the breaker"
    );
    // A request in flight on a removed backend finishes normally. ("a" is
    // open, so "b" serves it.)
    let pinned = balancer.clone().oneshot(infer("resnet")).await.unwrap();
    assert_eq!(f.served("b"), 1);
    tx.send(Change::Remove("b")).unwrap();
    until(|| breaker_of("b").is_none()).await;
    f.close_bodies();
    assert!(pinned.into_body().collect().await.is_ok());
}

type MockEndpoint = tower_test::mock::Mock<http::Request<String>, http::Response<String>>;

/// One backend whose endpoint is a `tower_test` mock the test drives.
fn one_mock_backend(
    config: BalanceConfig,
) -> (
    ModelBalancer<MockEndpoint, Lcg>,
    tower_test::mock::Handle<http::Request<String>, http::Response<String>>,
) {
    let (endpoint, handle) = tower_test::mock::pair();
    let backend = Backend::new(BackendId::new("busy").unwrap(), endpoint);
    let balancer = ModelBalancer::from_rng(ServiceList::new(vec![backend]), config, Lcg(1))
        .expect("inside a runtime");
    (balancer, handle)
}

#[tokio::test(start_paused = true)]
async fn a_busy_endpoint_gets_the_request_once_it_is_ready() {
    use tokio_test::{assert_pending, assert_ready_ok};
    use tower::Service;

    let (mut balancer, mut handle) = one_mock_backend(BalanceConfig::default());
    handle.allow(0);
    balancer.ready().await.unwrap();
    let mut response = tokio_test::task::spawn(balancer.call(infer("llama")));
    assert_pending!(response.poll());
    assert_eq!(balancer.handle().in_flight(), 1, "picked and waiting");
    assert!(!response.is_woken());

    handle.allow(1);
    assert!(
        response.is_woken(),
        "the endpoint's readiness wakes the request"
    );
    assert_pending!(response.poll());
    let (request, send) = handle
        .next_request()
        .await
        .expect("the request reached the endpoint");
    assert_eq!(request.headers()["x-model-id"], "llama");
    send.send_response(http::Response::new("done".to_owned()));
    let body = assert_ready_ok!(response.poll()).into_body();
    assert_eq!(body.collect().await.unwrap().to_bytes(), "done");
    assert_eq!(balancer.handle().in_flight(), 0);
    assert_eq!(balancer.handle().backends()[0].picked, 1);

    // A request dropped while it waits for its endpoint is cancelled: it
    // leaves the in-flight count and never reaches the endpoint.
    handle.allow(0);
    balancer.ready().await.unwrap();
    let mut waiting = tokio_test::task::spawn(balancer.call(infer("llama")));
    assert_pending!(waiting.poll());
    assert_eq!(balancer.handle().in_flight(), 1);
    drop(waiting);
    assert_eq!(balancer.handle().in_flight(), 0);

    // Ready at once: called in `call`, before the future is polled.
    handle.allow(1);
    balancer.ready().await.unwrap();
    let response = balancer.call(infer("llama"));
    let (_, send) = futures_util::FutureExt::now_or_never(handle.next_request())
        .flatten()
        .expect("sent in `call`, before any poll");
    send.send_response(http::Response::new(String::new()));
    response.await.expect("the endpoint answered");
    assert_eq!(balancer.handle().in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_endpoint_failing_readiness_fails_the_request_and_counts_as_a_failure() {
    use tower::Service;

    let (mut balancer, mut handle) = one_mock_backend(trips_after_3_of_4());
    for round in 0..3 {
        handle.send_error(format!("connection refused {round}"));
        let error = expect_err(balancer.ready().await.unwrap().call(infer("llama")).await);
        assert_eq!(error.to_string(), format!("connection refused {round}"));
        assert_eq!(balancer.handle().in_flight(), 0);
    }
    let backend = &balancer.handle().backends()[0];
    assert_eq!(backend.breaker_trips, 1, "3 failures of 3 calls trip it");
    assert_eq!(backend.breaker, BreakerState::Open);
}
