//! The layers around a real `reqwest::Client` (examples/reqwest_client),
//! against simulated model servers on loopback: the breaker alone on
//! `reqwest::Client` itself, and the balancer over the crate's
//! `endpoint::ReqwestEndpoint`. Driven by answers and counts, never by sleeps.

use std::time::Duration;

use http_body_util::BodyExt;
use tower::{Layer, ServiceBuilder, ServiceExt};
use tower_model_balance::backend::{Backend, BackendId};
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
use tower_model_balance::breaker::{BreakerConfig, CircuitBreakerLayer};
use tower_model_balance::classify::Outcome;
use tower_model_balance::discover::Static;
use tower_model_balance::endpoint::{ReqwestEndpoint, SetOrigin};
use tower_model_balance::error::BreakerOpen;
use tower_model_balance_sim::protocol::{infer_path, BACKEND_HEADER};
use tower_model_balance_sim::{Fault, ModelServer, ServerConfig};

fn classify(result: Result<&reqwest::Response, &reqwest::Error>) -> Outcome {
    match result {
        Ok(rsp) if rsp.status().is_server_error() => Outcome::Failure,
        Ok(_) => Outcome::Success,
        Err(_) => Outcome::Failure,
    }
}

#[tokio::test]
async fn the_breaker_alone_on_a_reqwest_client_stops_calling_a_failing_server() {
    let server = ModelServer::start("gpu-0", ServerConfig::default())
        .await
        .expect("a server");
    server.set_fault(Some(Fault::Unavailable));
    let client = reqwest::Client::new();
    let config = BreakerConfig::builder()
        .window(4)
        .minimum_calls(4)
        .build()
        .expect("a valid config");
    let breaker = CircuitBreakerLayer::new(config)
        .classifier(classify)
        .at_response()
        .layer(client.clone());
    let url = format!("http://{}{}", server.addr(), infer_path("resnet-50"));
    for _ in 0..4 {
        let req = client.post(&url).body("{}").build().expect("a request");
        let rsp: reqwest::Response = breaker.clone().oneshot(req).await.expect("a 503");
        assert_eq!(rsp.status(), 503);
    }
    let req = client.post(&url).body("{}").build().expect("a request");
    let error = breaker.oneshot(req).await.expect_err("open");
    assert!(error.is::<BreakerOpen>(), "{error}");
    assert_eq!(server.stats().requests, 4, "the fifth never reached it");
}

#[tokio::test]
async fn the_balancer_over_reqwest_endpoints_keeps_a_model_on_its_owner_and_records_at_the_end_of_the_stream(
) {
    let mut servers = Vec::new();
    let mut backends = Vec::new();
    let client = reqwest::Client::new();
    for i in 0..3 {
        let server = ModelServer::start(&format!("gpu-{i}"), ServerConfig::default())
            .await
            .expect("a server");
        let origin = format!("http://{}", server.addr());
        let endpoint = ServiceBuilder::new()
            .timeout(Duration::from_secs(30))
            .service(
                SetOrigin::new(ReqwestEndpoint::new(client.clone()), &origin).expect("an origin"),
            );
        backends.push(Backend::new(
            BackendId::new(&format!("gpu-{i}")).expect("an ID"),
            endpoint,
        ));
        servers.push(server);
    }
    let balancer = ModelBalancer::new(
        Static::new(backends).expect("distinct IDs"),
        BalanceConfig::default(),
    )
    .expect("inside a runtime");
    let handle = balancer.handle();

    let mut owners = Vec::new();
    for round in 1..=6 {
        let req = http::Request::post(infer_path("resnet-50"))
            .header("x-model-id", "resnet-50")
            .body("{}")
            .expect("a request");
        let rsp = balancer.clone().oneshot(req).await.expect("served");
        assert_eq!(rsp.status(), 200);
        owners.push(
            rsp.headers()[BACKEND_HEADER]
                .to_str()
                .expect("text")
                .to_string(),
        );
        assert_eq!(handle.in_flight(), 1, "in flight until the body ends");
        let body = rsp.into_body().collect().await.expect("a body").to_bytes();
        assert!(!body.is_empty());
        assert_eq!(
            handle.in_flight(),
            0,
            "out of flight at the end of the stream"
        );
        // Recorded, not cancelled: a cancelled request counts no call.
        let owner = BackendId::new(&owners[0]).expect("an ID");
        let calls = handle.breaker(&owner).expect("known").stats().calls;
        assert_eq!(calls, round, "each stream's end recorded once");
    }
    assert!(owners.iter().all(|o| *o == owners[0]), "{owners:?}");
    let cold: u64 = servers.iter().map(|s| s.stats().cold_loads).sum();
    assert_eq!(cold, 1, "one cold load, then warm on its owner");
}

#[tokio::test]
async fn a_request_reqwest_cannot_send_fails_with_its_error_and_reaches_no_server() {
    let server = ModelServer::start("gpu-0", ServerConfig::default())
        .await
        .expect("a server");
    let endpoint = ReqwestEndpoint::new(reqwest::Client::new());
    // A path-only URI: no `SetOrigin` put a scheme and host on it.
    let req = http::Request::post(infer_path("resnet-50"))
        .body("{}")
        .expect("a request");
    let error = endpoint.clone().oneshot(req).await.expect_err("no host");
    assert!(error.is_builder(), "reqwest's builder error: {error}");
    // The same endpoint sends a request with an origin.
    let origin = format!("http://{}", server.addr());
    let req = http::Request::post(infer_path("resnet-50"))
        .header("x-model-id", "resnet-50")
        .body(String::from("{}"))
        .expect("a request");
    let rsp = SetOrigin::new(endpoint, &origin)
        .expect("an origin")
        .oneshot(req)
        .await
        .expect("served");
    assert_eq!(rsp.status(), 200);
    assert_eq!(server.stats().requests, 1, "the first never reached it");
}
