//! The axum recipe of `docs/gateway.md`, as written (no probes, no
//! residency header, no declared models: nothing tells the balancer which
//! server holds what), hedges: over two simulated servers on loopback,
//! once one owner turns slow, the backups go to the other owner and win.

use std::net::SocketAddr;
use std::time::Duration;

use axum::{body::Body, extract::Request, http::StatusCode, response::IntoResponse};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use tower::{discover::ServiceList, ServiceBuilder, ServiceExt};
use tower_model_balance::backend::{Backend, BackendId};
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
use tower_model_balance::endpoint::{strip_hop_by_hop, SetOrigin};
use tower_model_balance::error::{InvalidRoute, NoHealthyBackend, PayloadTooLarge};
use tower_model_balance::hedge::{BalancerLoad, HedgeConfig, HedgeHandle};
use tower_model_balance::route::ModelFromBodyLayer;
use tower_model_balance::ServiceBuilderModelExt;
use tower_model_balance_sim::{protocol, Fault, InferenceTimes, ModelServer, ServerConfig};

/// The recipe's gateway in front of `origins`, on a port of its own; and
/// its hedge's counters.
async fn gateway(origins: &[String]) -> Result<(SocketAddr, HedgeHandle), tower::BoxError> {
    // From here to `axum::serve`: docs/gateway.md's code, as written.
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut backends = Vec::new();
    for origin in origins {
        let endpoint = ServiceBuilder::new()
            .timeout(Duration::from_secs(30))
            .service(SetOrigin::new(client.clone(), origin)?);
        backends.push(Backend::new(BackendId::new(origin)?, endpoint));
    }
    let balancer = ModelBalancer::new(ServiceList::new(backends), BalanceConfig::default())?;
    let gate = BalancerLoad::new(balancer.handle(), 8);
    let route = ModelFromBodyLayer::builder()
        .limit(1 << 20)
        .strip_routing_headers(true)
        .build()?;
    let stack = ServiceBuilder::new()
        .layer(route)
        .hedge(HedgeConfig::default(), gate)
        .service(balancer);
    let hedges = stack.get_ref().handle();

    let forward = move |req: Request| {
        let stack = stack.clone();
        async move {
            match stack.oneshot(req).await {
                Ok(response) => {
                    let (mut parts, body) = response.into_parts();
                    strip_hop_by_hop(&mut parts.headers);
                    http::Response::from_parts(parts, Body::new(body))
                }
                Err(e) if e.is::<InvalidRoute>() => {
                    (StatusCode::BAD_REQUEST, e.to_string()).into_response()
                }
                Err(e) if e.is::<PayloadTooLarge>() => {
                    StatusCode::PAYLOAD_TOO_LARGE.into_response()
                }
                Err(e) if e.is::<NoHealthyBackend>() => {
                    (StatusCode::SERVICE_UNAVAILABLE, e.to_string()).into_response()
                }
                Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
            }
        }
    };
    let app = axum::Router::new().route(
        protocol::CHAT_COMPLETIONS_PATH,
        axum::routing::post(forward),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((addr, hedges))
}

const CHAT: &str = r#"{"model": "llama-3-8b", "messages": [{"role": "user", "content": "hi"}]}"#;

/// One chat completion through the gateway at `addr`: its status.
async fn chat(
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    addr: SocketAddr,
) -> u16 {
    let request = http::Request::post(format!("http://{addr}{}", protocol::CHAT_COMPLETIONS_PATH))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(CHAT.as_bytes())))
        .unwrap();
    let response = client.request(request).await.unwrap();
    let status = response.status().as_u16();
    let _ = response.into_body().collect().await.unwrap();
    status
}

#[tokio::test]
async fn the_recipe_as_written_hedges_a_slowed_owner() {
    let config = || {
        ServerConfig::builder()
            .cold_load(Duration::from_millis(1))
            .inference(InferenceTimes::new(0, 10, 10).unwrap())
            .build()
            .unwrap()
    };
    let servers = [
        ModelServer::start("gpu-0", config()).await.unwrap(),
        ModelServer::start("gpu-1", config()).await.unwrap(),
    ];
    let origins: Vec<String> = servers
        .iter()
        .map(|s| format!("http://{}", s.addr()))
        .collect();
    let (addr, hedges) = gateway(&origins).await.unwrap();
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();

    // The hedge's default minimum of samples, one request at a time: the
    // model's p95 is about 10 ms, and one owner serves it.
    for _ in 0..20 {
        assert_eq!(chat(&client, addr).await, 200);
    }
    let s = hedges.stats();
    assert_eq!((s.requests, s.warming_up, s.hedges), (20, 20, 0));
    let owner = servers
        .iter()
        .position(|s| s.stats().work == 20)
        .expect("one owner");
    // The owner turns 100× slower (1 s a request).
    servers[owner].set_fault(Some(Fault::Slow {
        factor: 100,
        share: 1.0,
    }));
    // None of them waits for the slowed owner: each is hedged (the backup
    // answering first) or, once the balancer has learned, sent to the
    // other owner at once; waiting would take the owner's second.
    let slowed = Duration::from_secs(1);
    for i in 0..10 {
        let sent = tokio::time::Instant::now();
        assert_eq!(chat(&client, addr).await, 200);
        let took = sent.elapsed();
        assert!(
            took < slowed,
            "request {i} waited for the slowed owner: {took:?}"
        );
    }
    let s = hedges.stats();
    assert!(s.hedges >= 1, "backups sent: {s:?}");
    assert_eq!(
        s.hedges_won, s.hedges,
        "every backup beat the slowed owner: {s:?}"
    );
    assert_eq!(s.suppressed_by_no_alternative, 0, "{s:?}");
    assert_eq!(s.requests, s.hedges + s.not_hedged(), "{s:?}");
    let other = &servers[1 - owner];
    assert!(
        other.stats().work >= s.hedges,
        "the backups went to the other owner"
    );
}
