//! The balancer in front of real simulated model servers on 127.0.0.1,
//! through hyper-util's client. Driven by counts and events, never by
//! sleeping.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use tower::discover::ServiceList;
use tower::ServiceExt;
use tower_model_balance::backend::{Backend, BackendId};
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
use tower_model_balance::breaker::{BreakerConfig, BreakerState};
use tower_model_balance::endpoint::SetOrigin;
use tower_model_balance::ring::{Ring, RingConfig};
use tower_model_balance::route::ModelId;
use tower_model_balance_sim::{protocol, Fault, InferenceTimes, ModelServer, ServerConfig};

type Endpoint = SetOrigin<Client<HttpConnector, Full<Bytes>>>;

async fn servers(n: usize) -> Vec<ModelServer> {
    let config = ServerConfig::builder()
        .cold_load(Duration::from_millis(20))
        .inference(InferenceTimes::new(0, 1, 2).unwrap())
        .build()
        .unwrap();
    let mut servers = Vec::new();
    for i in 0..n {
        servers.push(
            ModelServer::start(&format!("node-{i}"), config.clone())
                .await
                .unwrap(),
        );
    }
    servers
}

fn balancer(servers: &[ModelServer], config: BalanceConfig) -> ModelBalancer<Endpoint> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let backends: Vec<_> = servers
        .iter()
        .map(|s| {
            let endpoint = SetOrigin::new(client.clone(), &format!("http://{}", s.addr())).unwrap();
            Backend::new(BackendId::new(s.name()).unwrap(), endpoint)
        })
        .collect();
    ModelBalancer::new(ServiceList::new(backends), config).unwrap()
}

/// Status, backend name and cold-load flag of one inference request.
async fn infer(balancer: &ModelBalancer<Endpoint>, model: &str) -> (u16, String, bool) {
    let req = http::Request::post(protocol::infer_path(model))
        .header("x-model-id", model)
        .body(Full::from("{}"))
        .unwrap();
    // A bound so that a broken server fails the test instead of hanging it.
    let rsp = tokio::time::timeout(Duration::from_secs(10), balancer.clone().oneshot(req))
        .await
        .expect("answered within 10 s")
        .unwrap();
    let status = rsp.status().as_u16();
    let header = |name| {
        rsp.headers()
            .get(name)
            .map(|v: &http::HeaderValue| v.to_str().unwrap().to_owned())
    };
    let backend = header(protocol::BACKEND_HEADER).unwrap_or_default();
    let cold = header(protocol::COLD_LOAD_HEADER).as_deref() == Some("true");
    rsp.into_body().collect().await.unwrap();
    (status, backend, cold)
}

fn primary(servers: &[ModelServer], model: &str) -> usize {
    let members = servers
        .iter()
        .map(|s| (BackendId::new(s.name()).unwrap(), 1));
    let ring = Ring::build(&RingConfig::default(), members).unwrap();
    ring.walk(ModelId::new(model).unwrap().hash64())
        .next()
        .unwrap()
}

#[tokio::test]
async fn a_model_sticks_to_its_owner_and_stays_warm() {
    let servers = servers(3).await;
    let balancer = balancer(&servers, BalanceConfig::default());
    let owner = &servers[primary(&servers, "llama-3-8b")];
    let (status, backend, cold) = infer(&balancer, "llama-3-8b").await;
    assert_eq!((status, backend.as_str(), cold), (200, owner.name(), true));
    for _ in 0..5 {
        let (status, backend, cold) = infer(&balancer, "llama-3-8b").await;
        assert_eq!((status, backend.as_str(), cold), (200, owner.name(), false));
    }
    assert_eq!(owner.stats().cold_loads, 1);
    assert_eq!(owner.resident_models(), ["llama-3-8b"]);
    assert_eq!(
        balancer.handle().in_flight(),
        0,
        "every body read to its end"
    );
}

#[tokio::test]
async fn an_unavailable_owner_is_ejected_then_probed_back() {
    let servers = servers(3).await;
    let policy = BreakerConfig::builder()
        .window(4)
        .minimum_calls(3)
        .open_duration(Duration::from_millis(300))
        .jitter(false)
        .half_open_permits(1)
        .build()
        .unwrap();
    // One owner: with two, the second serves the model while the first is
    // out, and keeps it (served owners come first) — the first would be
    // probed by its other models' traffic, which this test does not send.
    let config = BalanceConfig::builder()
        .breaker(policy)
        .model_owners(ModelId::new("resnet-50").unwrap(), 1)
        .build()
        .unwrap();
    let balancer = balancer(&servers, config);
    let handle = balancer.handle();
    let owner = &servers[primary(&servers, "resnet-50")];
    owner.set_fault(Some(Fault::Unavailable));
    let mut failures = 0;
    for _ in 0..3 {
        let (status, _, _) = infer(&balancer, "resnet-50").await;
        failures += usize::from(status == 503);
    }
    assert_eq!(failures, 3, "the window needs its minimum of calls");
    let state = |name: &str| {
        handle
            .backends()
            .into_iter()
            .find(|b| b.id.as_str() == name)
            .unwrap()
            .breaker
    };
    assert_eq!(state(owner.name()), BreakerState::Open);
    // While open, the next owner serves: every request succeeds (checked
    // only while the breaker still reads open: real time runs on).
    for _ in 0..5 {
        let open = state(owner.name()) == BreakerState::Open;
        let (status, backend, _) = infer(&balancer, "resnet-50").await;
        if open && state(owner.name()) == BreakerState::Open {
            assert_eq!(status, 200);
            assert_ne!(backend, owner.name());
        }
    }
    owner.set_fault(None);
    // Once the open duration is up, a probe closes it and the owner is back.
    // Real time: requests until the 300 ms have passed and a probe went
    // through (a generous deadline only bounds a failing run).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut served_by_owner = false;
    while tokio::time::Instant::now() < deadline {
        let (status, backend, _) = infer(&balancer, "resnet-50").await;
        assert_eq!(status, 200);
        if backend == owner.name() {
            served_by_owner = true;
            break;
        }
    }
    assert!(served_by_owner, "the healed owner came back");
    assert_eq!(state(owner.name()), BreakerState::Closed);
    assert_eq!(handle.stats().breaker_trips, 1);
}
