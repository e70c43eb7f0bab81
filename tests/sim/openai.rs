//! The simulated server's OpenAI-compatible inference routes over real
//! HTTP on 127.0.0.1: served as a KServe v2 inference of the body's model
//! is, with OpenAI-shaped answers and vLLM's error bodies.

use std::time::Duration;

use crate::sim_http;

use tower_model_balance_sim::{protocol, Fault, InferenceTimes, ModelServer, ServerConfig};

use sim_http::{client, send};

/// Status, `x-sim-cold-load` header and JSON body of a POST.
async fn post(
    server: &ModelServer,
    path: &str,
    body: &str,
) -> (u16, Option<String>, serde_json::Value) {
    let (status, cold, body) = send(&client(), server, http::Method::POST, path, body).await;
    let json = serde_json::from_str(&body).unwrap_or(serde_json::Value::Null);
    (status, cold, json)
}

fn fast() -> ServerConfig {
    ServerConfig::builder()
        .cold_load(Duration::from_millis(5))
        .inference(InferenceTimes::new(0, 1, 2).unwrap())
        .build()
        .unwrap()
}

const CHAT: &str = r#"{"model": "llama-3-8b", "messages": [{"role": "user", "content": "hi"}]}"#;

#[tokio::test]
async fn chat_completions_load_and_then_serve_warm() {
    let server = ModelServer::start("node-0", fast()).await.unwrap();
    let (status, cold, body) = post(&server, protocol::CHAT_COMPLETIONS_PATH, CHAT).await;
    assert_eq!((status, cold.as_deref()), (200, Some("true")));
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "llama-3-8b");
    let (status, cold, _) = post(&server, protocol::CHAT_COMPLETIONS_PATH, CHAT).await;
    assert_eq!((status, cold.as_deref()), (200, Some("false")));
    // The same model through the KServe v2 route is warm too.
    let (status, cold, body) = post(&server, &protocol::infer_path("llama-3-8b"), "{}").await;
    assert_eq!((status, cold.as_deref()), (200, Some("false")));
    assert_eq!(body["model_name"], "llama-3-8b");
    let stats = server.stats();
    assert_eq!((stats.work, stats.cold_loads), (3, 1));
    assert_eq!(server.resident_models(), ["llama-3-8b"]);

    let completion = r#"{"model": "m", "prompt": "hi"}"#;
    let (status, _, body) = post(&server, protocol::COMPLETIONS_PATH, completion).await;
    assert_eq!(status, 200);
    assert_eq!(body["choices"][0]["text"], protocol::COMPLETION_TEXT);
    let (status, _, body) = post(&server, protocol::EMBEDDINGS_PATH, completion).await;
    assert_eq!(status, 200);
    assert_eq!(body["data"][0]["object"], "embedding");
}

/// A name with a `/` is the same model by either route: percent-encoded in
/// the KServe v2 path (`org%2Fm`), plain in a JSON body.
#[tokio::test]
async fn a_percent_encoded_kserve_name_is_the_json_bodys_model() {
    let server = ModelServer::start("node-0", fast()).await.unwrap();
    let body = r#"{"model": "org/m", "prompt": "hi"}"#;
    let (status, cold, _) = post(&server, protocol::COMPLETIONS_PATH, body).await;
    assert_eq!((status, cold.as_deref()), (200, Some("true")));
    let (status, cold, body) = post(&server, "/v2/models/org%2Fm/infer", "{}").await;
    assert_eq!((status, cold.as_deref()), (200, Some("false")));
    assert_eq!(body["model_name"], "org/m");
    assert_eq!(server.resident_models(), ["org/m"]);
    let (status, _, _) = post(&server, "/v2/models/org%2/infer", "{}").await;
    assert_eq!(status, 404, "a bad escape names no model");
}

#[tokio::test]
async fn errors_have_vllm_bodies() {
    let server = ModelServer::start("node-0", fast()).await.unwrap();
    let path = protocol::COMPLETIONS_PATH;
    let (status, _, body) = post(&server, path, r#"{"prompt": "hi"}"#).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["type"], "BadRequestError");
    let (status, _, body) = post(&server, path, r#"{"model": "a b"}"#).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["type"], "NotFoundError");
    assert_eq!(body["error"]["message"], "The model `a b` does not exist.");
    assert_eq!(server.stats().cold_loads, 0);

    server.set_fault(Some(Fault::Unavailable));
    let (status, _, _) = post(&server, protocol::CHAT_COMPLETIONS_PATH, CHAT).await;
    assert_eq!(status, 503);
    assert_eq!(server.stats().unavailable, 1);
}

#[tokio::test]
async fn a_model_the_server_does_not_serve_is_a_vllm_404() {
    // Explicit mode: nothing is loaded until asked.
    let config = ServerConfig::builder().explicit_load(true).build().unwrap();
    let server = ModelServer::start("node-0", config).await.unwrap();
    let (status, _, body) = post(&server, protocol::CHAT_COMPLETIONS_PATH, CHAT).await;
    assert_eq!(status, 404);
    assert_eq!(
        body["error"]["message"],
        "The model `llama-3-8b` does not exist."
    );
    assert_eq!(server.stats().not_found, 1);
}
