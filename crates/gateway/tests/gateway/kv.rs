//! Precise prefix routing's fallback tokenizer, `ServerTokenize`, against
//! a real `/tokenize` server on a free port: the JSON it sends for chat and
//! completions requests, the tokens it returns, and its errors.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tower_model_balance::endpoint::Origin;
use tower_model_balance::kv::Tokenize;

use crate::app::{backend_tls_client, ServerTokenize};

/// The bodies the server was sent, in order.
type Sent = Arc<Mutex<Vec<Value>>>;

/// A vLLM-shaped `/tokenize`: `{"count", "max_model_len", "tokens"}` with
/// tokens 1, 2, 3; a 500 for the model `broken`, a body without tokens
/// for `odd`.
async fn tokenize_server() -> (Origin, Sent) {
    async fn tokenize(State(sent): State<Sent>, body: Bytes) -> (StatusCode, String) {
        let body: Value = serde_json::from_slice(&body).unwrap();
        let model = body["model"].as_str().unwrap_or("").to_owned();
        sent.lock().unwrap().push(body);
        match model.as_str() {
            "broken" => (StatusCode::INTERNAL_SERVER_ERROR, "{}".into()),
            "odd" => (StatusCode::OK, r#"{"count": 3}"#.into()),
            _ => (
                StatusCode::OK,
                json!({"count": 3, "max_model_len": 4096, "tokens": [1, 2, 3]}).to_string(),
            ),
        }
    }
    let sent = Sent::default();
    let router = Router::new()
        .route("/tokenize", post(tokenize))
        .with_state(sent.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = Origin::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (origin, sent)
}

fn tokenizer(origin: Origin) -> ServerTokenize {
    let client = backend_tls_client(rustls::RootCertStore::empty(), Duration::from_secs(5));
    ServerTokenize::new(client, origin, Duration::from_secs(5))
}

async fn tokens(
    tokenizer: &ServerTokenize,
    path: &str,
    body: Value,
) -> Result<Option<Vec<u32>>, String> {
    let body = Bytes::from(body.to_string());
    tokenizer
        .tokenize(path, &body)
        .await
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn chat_and_completions_are_asked_as_vllm_renders_them() {
    let (origin, sent) = tokenize_server().await;
    let tokenizer = tokenizer(origin);
    let messages = json!([{"role": "user", "content": "hello"}]);
    let chat = json!({
        "model": "m",
        "messages": messages,
        "stream": true,
        "max_tokens": 8,
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "chat_template_kwargs": {"enable_thinking": false},
    });
    let got = tokens(&tokenizer, "/v1/chat/completions", chat).await;
    assert_eq!(got, Ok(Some(vec![1, 2, 3])));
    let continued = json!({
        "model": "m",
        "messages": messages,
        "add_generation_prompt": false,
        "continue_final_message": true,
    });
    let got = tokens(&tokenizer, "/v1/chat/completions", continued).await;
    assert_eq!(got, Ok(Some(vec![1, 2, 3])));
    let completion = json!({"model": "m", "prompt": "once upon", "max_tokens": 8});
    let got = tokens(&tokenizer, "/v1/completions", completion).await;
    assert_eq!(got, Ok(Some(vec![1, 2, 3])));
    assert_eq!(
        *sent.lock().unwrap(),
        [
            json!({
                "model": "m",
                "messages": messages,
                "add_generation_prompt": true,
                "add_special_tokens": false,
                "tools": [{"type": "function", "function": {"name": "f"}}],
                "chat_template_kwargs": {"enable_thinking": false},
            }),
            json!({
                "model": "m",
                "messages": messages,
                "add_generation_prompt": false,
                "continue_final_message": true,
                "add_special_tokens": false,
            }),
            json!({"model": "m", "prompt": "once upon", "add_special_tokens": true}),
        ]
    );
}

#[tokio::test]
async fn token_ids_and_other_bodies_ask_nothing() {
    let (origin, sent) = tokenize_server().await;
    let tokenizer = tokenizer(origin);
    let ids = json!({"model": "m", "prompt": [7, 8, 9]});
    let got = tokens(&tokenizer, "/v1/completions", ids).await;
    assert_eq!(got, Ok(Some(vec![7, 8, 9])));
    for (path, body) in [
        ("/v1/embeddings", json!({"model": "m", "input": "x"})),
        (
            "/v1/completions",
            json!({"model": "m", "prompt": ["a", "b"]}),
        ),
        ("/v2/models/m/infer", json!({"inputs": []})),
    ] {
        assert_eq!(tokens(&tokenizer, path, body).await, Ok(None), "{path}");
    }
    assert!(sent.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_failed_answer_is_an_error() {
    let (origin, _sent) = tokenize_server().await;
    let server = tokenizer(origin.clone());
    let broken = json!({"model": "broken", "prompt": "x"});
    let error = tokens(&server, "/v1/completions", broken)
        .await
        .unwrap_err();
    assert_eq!(
        error,
        format!("POST {origin}/tokenize answered 500 Internal Server Error")
    );
    let odd = json!({"model": "odd", "prompt": "x"});
    let error = tokens(&server, "/v1/completions", odd).await.unwrap_err();
    assert!(
        error.starts_with(&format!("POST {origin}/tokenize: not a list of tokens")),
        "{error}"
    );
    // Nobody listening: the connection refused, said with the origin.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gone = Origin::parse(&format!("http://{}", closed.local_addr().unwrap())).unwrap();
    drop(closed);
    let error = tokens(
        &tokenizer(gone.clone()),
        "/v1/completions",
        json!({"prompt": "x"}),
    )
    .await
    .unwrap_err();
    assert!(
        error.starts_with(&format!("POST {gone}/tokenize: ")),
        "{error}"
    );
}

/// A gateway with `--kv-events` on its backends serves as without them
/// while no event has given the block size: the prompt's layer is in the
/// stack, and hands each request on as it came.
#[tokio::test]
async fn a_gateway_with_kv_events_serves_before_any_event() {
    let gw = crate::gateway::start("kv", 2, |config| {
        config.kv_events = config
            .backends
            .iter()
            .map(|(id, _)| (id.clone(), "tcp://127.0.0.1:1".to_owned()))
            .collect();
    })
    .await;
    let chat = r#"{"model": "llama-3-8b", "messages": [{"role": "user", "content": "hi"}]}"#;
    let reply = gw.post("/v1/chat/completions", chat).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}
