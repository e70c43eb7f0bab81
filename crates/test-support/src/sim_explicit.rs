//! What the explicit model-control tests of the simulated server share
//! (`tests/sim/explicit.rs`, `tests/sim/lora.rs`): an explicit-mode
//! config, and the requests and waits they drive it with.

use std::time::Duration;

use tower_model_balance_sim::{
    protocol, InferenceTimes, ModelServer, ServerConfig, ServerConfigBuilder, ServerStats,
};

use crate::sim_http::{send, HttpClient, BOUND};

pub fn explicit() -> ServerConfigBuilder {
    ServerConfig::builder()
        .explicit_load(true)
        .cold_load(Duration::from_millis(20))
        .inference(InferenceTimes::new(0, 1, 2).unwrap())
}

pub async fn post(
    client: &HttpClient,
    server: &ModelServer,
    path: &str,
    body: &str,
) -> (u16, String) {
    let (status, _, body) = send(client, server, http::Method::POST, path, body).await;
    (status, body)
}

/// Status and cold-load flag of an inference request.
pub async fn infer(client: &HttpClient, server: &ModelServer, model: &str) -> (u16, bool, String) {
    let path = protocol::infer_path(model);
    let (status, cold, body) = send(client, server, http::Method::POST, &path, "{}").await;
    (status, cold.as_deref() == Some("true"), body)
}

pub async fn index(client: &HttpClient, server: &ModelServer, body: &str) -> String {
    let (status, body) = post(client, server, protocol::REPOSITORY_INDEX_PATH, body).await;
    assert_eq!(status, 200);
    body
}

pub async fn stats_until(server: &ModelServer, done: impl Fn(&ServerStats) -> bool) -> ServerStats {
    tokio::time::timeout(BOUND, server.wait_for_stats(done))
        .await
        .expect("the stats got there")
}

pub fn ready(model: &str) -> String {
    format!(r#"{{"name":"{model}","version":"1","state":"READY","reason":""}}"#)
}

pub fn state(model: &str, state: &str, reason: &str) -> String {
    format!(r#"{{"name":"{model}","version":"1","state":"{state}","reason":"{reason}"}}"#)
}
