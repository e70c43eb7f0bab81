//! vLLM's `GET /health` (and `HEAD`) over a real socket on 127.0.0.1: 200 with an
//! empty body while the server serves, 503 while a fault makes it
//! unavailable, as `GET /v2/health/ready` answers; and the time the
//! server took, which every answer reports.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::time::Instant;
use tower_model_balance_sim::{protocol, Fault, InferenceTimes, ModelServer, ServerConfig};

/// A bound so that a broken server fails the test instead of hanging it.
const BOUND: Duration = Duration::from_secs(10);

/// The answer to `req`, its body unread.
async fn send<B>(req: http::Request<B>) -> http::Response<hyper::body::Incoming>
where
    B: http_body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let client = Client::builder(TokioExecutor::new()).build_http::<B>();
    tokio::time::timeout(BOUND, client.request(req))
        .await
        .expect("answered in time")
        .expect("a response")
}

/// The status and body of `GET path` on `server`.
async fn get(server: &ModelServer, path: &str) -> (u16, Bytes) {
    let req = http::Request::get(format!("http://{}{path}", server.addr()))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let rsp = send(req).await;
    let status = rsp.status().as_u16();
    let body = rsp.into_body().collect().await.expect("a whole body");
    (status, body.to_bytes())
}

#[tokio::test]
async fn health_answers_as_vllm_does_and_follows_the_fault() {
    let server = ModelServer::start("node-0", ServerConfig::default())
        .await
        .unwrap();
    assert_eq!(protocol::HEALTH_PATH, "/health");
    assert_eq!(
        get(&server, protocol::HEALTH_PATH).await,
        (200, Bytes::new())
    );

    server.set_fault(Some(Fault::Unavailable));
    for path in [protocol::HEALTH_PATH, protocol::READY_PATH] {
        assert_eq!(get(&server, path).await.0, 503, "{path} while unavailable");
    }

    server.set_fault(None);
    assert_eq!(
        get(&server, protocol::HEALTH_PATH).await,
        (200, Bytes::new())
    );
    // Only GET: a POST to the path is no route.
    let post = http::Request::post(format!("http://{}/health", server.addr()))
        .body(Empty::<Bytes>::new())
        .unwrap();
    assert_eq!(send(post).await.status(), 404);
}

/// vLLM answers `HEAD /health` 200 as it answers `GET` (a client such as
/// a load balancer's check may ask either); the answer has no body.
#[tokio::test]
async fn head_health_answers_as_get_does() {
    let server = ModelServer::start("node-0", ServerConfig::default())
        .await
        .unwrap();
    let head = |path: &str| {
        http::Request::head(format!("http://{}{path}", server.addr()))
            .body(Empty::<Bytes>::new())
            .unwrap()
    };
    for path in [protocol::HEALTH_PATH, protocol::READY_PATH] {
        let rsp = send(head(path)).await;
        assert_eq!(rsp.status(), 200, "HEAD {path}");
        let body = rsp.into_body().collect().await.expect("a whole body");
        assert!(body.to_bytes().is_empty(), "HEAD {path} has no body");
        assert_eq!(get(&server, path).await.0, 200, "GET {path}");
    }
    server.set_fault(Some(Fault::Unavailable));
    assert_eq!(send(head(protocol::HEALTH_PATH)).await.status(), 503);
}

#[tokio::test]
async fn every_answer_says_how_long_the_server_took() {
    let config = ServerConfig::builder()
        .inference(InferenceTimes::new(0, 20, 20).unwrap())
        .cold_load(Duration::from_millis(30))
        .build()
        .unwrap();
    let server = ModelServer::start("node-0", config).await.unwrap();
    let served = |rsp: &http::Response<_>| -> u64 {
        rsp.headers()[protocol::SERVED_IN_HEADER]
            .to_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    for (cold, at_least) in [(true, 50_000), (false, 20_000)] {
        let req = http::Request::post(format!(
            "http://{}{}",
            server.addr(),
            protocol::CHAT_COMPLETIONS_PATH
        ))
        .body(Full::<Bytes>::from(r#"{"model": "m", "messages": []}"#))
        .unwrap();
        let sent = Instant::now();
        let rsp = send(req).await;
        let took = sent.elapsed().as_micros() as u64;
        assert_eq!(
            rsp.headers()[protocol::COLD_LOAD_HEADER],
            if cold { "true" } else { "false" }
        );
        let served = served(&rsp);
        assert!(
            (at_least..=took).contains(&served),
            "served in {served} µs, at least {at_least}, the client saw {took}"
        );
    }
    let (status, _) = get(&server, protocol::HEALTH_PATH).await;
    assert_eq!(status, 200);
}

/// KServe v2 model metadata and readiness, as MLServer answers them: a
/// model loaded answers, one not loaded is a 404 with a KServe error body.
#[tokio::test]
async fn model_metadata_and_readiness_answer_for_a_loaded_model_only() {
    let config = ServerConfig::builder()
        .inference(InferenceTimes::new(0, 1, 1).unwrap())
        .cold_load(Duration::from_millis(1))
        .build()
        .unwrap();
    let server = ModelServer::start("node-0", config).await.unwrap();
    let (status, body) = get(&server, "/v2/models/resnet-50").await;
    assert_eq!(status, 404);
    assert_eq!(body, r#"{"error":"Model resnet-50 not found"}"#);
    assert_eq!(get(&server, "/v2/models/resnet-50/ready").await.0, 404);
    // An inference loads it.
    let infer = http::Request::post(format!(
        "http://{}{}",
        server.addr(),
        protocol::infer_path("resnet-50")
    ))
    .body(Full::<Bytes>::from("{}"))
    .unwrap();
    assert_eq!(send(infer).await.status(), 200);
    let (status, body) = get(&server, "/v2/models/resnet-50").await;
    assert_eq!(status, 200);
    let metadata: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(metadata["name"], "resnet-50");
    assert_eq!(metadata["versions"][0], "1");
    for path in [
        "/v2/models/resnet-50/ready",
        "/v2/models/resnet-50/versions/1/ready",
    ] {
        assert_eq!(get(&server, path).await, (200, Bytes::new()), "{path}");
    }
    server.set_fault(Some(Fault::Unavailable));
    assert_eq!(get(&server, "/v2/models/resnet-50/ready").await.0, 503);
}
