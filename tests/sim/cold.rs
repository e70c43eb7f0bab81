//! The simulator's cold flag: a request that arrives while its model loads
//! on the server waits for that load — in a serving slot or queued for one —
//! and is cold, as the request that started the load. Real sockets on
//! 127.0.0.1, driven by the server's counters.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tower_model_balance_sim::{protocol, InferenceTimes, ModelServer, ServerConfig};

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

/// Sends one inference for `model`; whether the server marked it cold.
async fn infer(client: &HttpClient, addr: SocketAddr, model: &str) -> bool {
    let uri = format!("http://{addr}{}", protocol::infer_path(model));
    let req = http::Request::post(uri)
        .header("x-model-id", model)
        .body(Full::from(r#"{"inputs":[]}"#))
        .unwrap();
    let rsp = client.request(req).await.unwrap();
    assert_eq!(rsp.status(), 200);
    let cold = rsp.headers()[protocol::COLD_LOAD_HEADER] == "true";
    rsp.into_body().collect().await.unwrap();
    cold
}

#[tokio::test]
async fn a_request_queued_behind_its_models_load_is_cold() {
    // One serving slot: the second request queues while the first loads
    // the model, and gets the slot once the model is ready.
    let config = ServerConfig::builder()
        .concurrency(1)
        .cold_load(Duration::from_millis(300))
        .inference(InferenceTimes::new(0, 1, 2).unwrap())
        .build()
        .unwrap();
    let server = ModelServer::start("gpu-0", config).await.unwrap();
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();

    let addr = server.addr();
    let first = tokio::spawn({
        let client = client.clone();
        async move { infer(&client, addr, "m").await }
    });
    // The load has started (counted when it starts): the model is loading.
    let started = tokio::time::timeout(Duration::from_secs(10), async {
        while server.stats().cold_loads == 0 {
            tokio::task::yield_now().await;
        }
    });
    started.await.expect("the first request starts the load");
    let second = infer(&client, addr, "m").await;
    assert!(first.await.unwrap(), "the request that loaded the model");
    assert!(
        second,
        "it arrived while the model loaded: it waited for the load"
    );
    assert!(!infer(&client, addr, "m").await, "the model is warm now");
    assert_eq!(server.stats().cold_loads, 1);
}
