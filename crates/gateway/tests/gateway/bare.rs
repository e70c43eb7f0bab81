//! The bare proxy (`bare`): each request to the next backend in turn (or
//! the one its `x-bare-backend` names),
//! body and answer passed through; 502 for a backend that cannot be
//! reached.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;
use tower_model_balance::endpoint::Origin;
use tower_model_balance_gateway::app;
use tower_model_balance_gateway::bare::BareProxy;
use tower_model_balance_sim::{protocol, ModelServer, ServerConfig};

/// A bound so that a broken proxy fails the test instead of hanging it.
const BOUND: Duration = Duration::from_secs(10);

/// Two simulated servers (`sim-0`, `sim-1`) started.
async fn two_servers() -> Vec<ModelServer> {
    let mut servers = Vec::new();
    for name in ["sim-0", "sim-1"] {
        servers.push(
            ModelServer::start(name, ServerConfig::default())
                .await
                .unwrap(),
        );
    }
    servers
}

/// A bare proxy over `origins` served on a free port: its address, what
/// stops it, and its task.
async fn serve(
    origins: &[Origin],
) -> (
    std::net::SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let proxy = BareProxy::new(origins).expect("backends");
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(app::serve(listener, proxy.into_service(), async {
        let _ = stopped.await;
    }));
    (addr, stop, serving)
}

#[tokio::test]
async fn round_robin_over_the_backends_body_and_answer_passed_through() {
    let servers = two_servers().await;
    // A port nothing listens on: the third backend cannot be reached.
    let dead = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let mut origins: Vec<Origin> = servers.iter().map(|s| Origin::http(s.addr())).collect();
    origins.push(Origin::http(dead_addr));
    assert!(BareProxy::new(&[]).is_none());
    let (addr, stop, serving) = serve(&origins).await;
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut answered = Vec::new();
    for _ in 0..6 {
        let body =
            r#"{"model":"llama-3-8b","messages":[{"role":"user","content":"hi"}],"max_tokens":4}"#;
        let req = http::Request::post(format!("http://{addr}{}", protocol::CHAT_COMPLETIONS_PATH))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::from(body))
            .unwrap();
        let rsp = tokio::time::timeout(BOUND, client.request(req))
            .await
            .expect("answered in time")
            .expect("a response");
        let status = rsp.status().as_u16();
        let backend = rsp.headers().get(protocol::BACKEND_HEADER).cloned();
        let body = rsp.into_body().collect().await.unwrap().to_bytes();
        if status == 200 {
            let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(json["object"], "chat.completion", "{json}");
        }
        answered.push((status, backend.map(|b| b.to_str().unwrap().to_owned())));
    }
    let expected: Vec<(u16, Option<String>)> = (0..6)
        .map(|i| match i % 3 {
            2 => (502, None),
            n => (200, Some(format!("sim-{n}"))),
        })
        .collect();
    assert_eq!(answered, expected);
    let _ = stop.send(());
    serving.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_request_steered_by_index_goes_there_and_a_bad_index_takes_its_turn() {
    let servers = two_servers().await;
    let origins: Vec<Origin> = servers.iter().map(|s| Origin::http(s.addr())).collect();
    let (addr, stop, serving) = serve(&origins).await;
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut answered = Vec::new();
    // Steered twice to 1, once to 0; then an index past the backends and
    // one that is no number: round robin, from its first turn.
    for steer in ["1", "1", "0", "2", "x", ""] {
        let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4}"#;
        let req = http::Request::post(format!("http://{addr}{}", protocol::CHAT_COMPLETIONS_PATH))
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(tower_model_balance_gateway::bare::STEER_HEADER, steer)
            .body(Full::from(body))
            .unwrap();
        let rsp = tokio::time::timeout(BOUND, client.request(req))
            .await
            .expect("answered in time")
            .expect("a response");
        assert_eq!(rsp.status(), 200);
        let backend = rsp.headers()[protocol::BACKEND_HEADER].to_str().unwrap();
        answered.push(backend.to_owned());
    }
    assert_eq!(
        answered,
        ["sim-1", "sim-1", "sim-0", "sim-0", "sim-1", "sim-0"]
    );
    let _ = stop.send(());
    serving.await.unwrap().unwrap();
}
