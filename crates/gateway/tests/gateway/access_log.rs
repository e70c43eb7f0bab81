//! The access log of the `gateway` binary (`--access-log json`): a line
//! per request with its ID (the client's, sent back), model, status,
//! backend and reason, times and how it ended — for an answer forwarded
//! and for one of the gateway's own; a reader of the log that stops
//! reading blocks no request and no exit.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_gets_a_json_line_with_its_id_model_backend_and_times() {
    let mut gateway = crate::binary::start_with_sims(2, &["--access-log", "json"]).await;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let addr = gateway.addr;
    let send = |body: &'static str, id: Option<&'static str>| {
        let mut req = http::Request::post(format!("http://{addr}/v1/chat/completions"));
        if let Some(id) = id {
            req = req.header("x-request-id", id);
        }
        let req = req.body(Full::new(Bytes::from(body))).unwrap();
        let client = client.clone();
        async move {
            let response = client.request(req).await.unwrap();
            let id = response.headers()["x-request-id"]
                .to_str()
                .unwrap()
                .to_owned();
            let status = response.status().as_u16();
            response.into_body().collect().await.unwrap();
            (status, id)
        }
    };
    let chat = r#"{"model": "llama-3-8b", "messages": [{"role": "user", "content": "hi"}]}"#;
    let (status, id) = send(chat, Some("req-42")).await;
    assert_eq!((status, id.as_str()), (200, "req-42"));
    let line = gateway.line_starting("{").await;
    let entry: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(entry["id"], "req-42", "{line}");
    assert_eq!(entry["method"], "POST");
    assert_eq!(entry["path"], "/v1/chat/completions");
    // Sent to a backend once: no hedge, no retry.
    assert_eq!(entry["attempts"], 1, "{line}");
    assert_eq!(entry["model"], "llama-3-8b");
    assert_eq!(entry["status"], 200);
    assert!(
        entry["backend"].as_str().unwrap().starts_with("sim-"),
        "{line}"
    );
    assert!(entry["reason"].is_string(), "{line}");
    let (ttft, total) = (
        entry["ttft_ms"].as_f64().unwrap(),
        entry["duration_ms"].as_f64().unwrap(),
    );
    assert!(ttft > 0.0 && ttft <= total, "{line}");
    assert_eq!(entry["ended"], "complete");
    // The gateway's own answer (a model ID with a space): a line too, an
    // ID made for it.
    let (status, id) = send(r#"{"model": "llama 3", "prompt": "hi"}"#, None).await;
    assert_eq!(status, 400);
    assert!(id.starts_with("gw-"), "{id}");
    let line = gateway.line_starting("{").await;
    let entry: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(entry["id"], id.as_str(), "{line}");
    assert_eq!(entry["status"], 400);
    assert_eq!(entry["ended"], "invalid_route");
    assert!(entry["backend"].is_null(), "{line}");
}

/// Every route of the client listener has its line and its ID: the model
/// list, a route that does not exist, a wrong method; and the ID made is
/// the process's own (`gw-`, a random tag, a count).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_routes_and_the_gateways_own_404_are_logged_with_an_id() {
    let mut gateway = crate::binary::start_with_sims(2, &["--access-log", "json"]).await;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let addr = gateway.addr;
    let mut ids = Vec::new();
    for (method, path, status, ended) in [
        ("GET", "/v1/models", 200, "complete"),
        ("GET", "/no/such/route", 404, "not_found"),
        ("GET", "/v1/completions", 405, "method_not_allowed"),
    ] {
        let req = http::Request::builder()
            .method(method)
            .uri(format!("http://{addr}{path}"))
            .body(Full::default())
            .unwrap();
        let response = client.request(req).await.unwrap();
        assert_eq!(response.status(), status, "{path}");
        let id = response.headers()["x-request-id"]
            .to_str()
            .unwrap()
            .to_owned();
        response.into_body().collect().await.unwrap();
        let line = gateway.line_starting("{").await;
        let entry: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(entry["path"], path, "{line}");
        assert_eq!(entry["status"], status, "{line}");
        assert_eq!(entry["ended"], ended, "{line}");
        assert_eq!(entry["id"], id.as_str(), "{line}");
        ids.push(id);
    }
    // gw-<16 hex digits>-<count>: one tag, counts that differ.
    let tags: Vec<&str> = ids.iter().map(|id| id.split('-').nth(1).unwrap()).collect();
    assert!(
        tags.iter().all(|t| t.len() == 16 && *t == tags[0]),
        "{ids:?}"
    );
    assert_ne!(ids[0], ids[1]);
}

/// A client that hangs up before its answer's head (its backend accepts
/// and never answers) still has its line: status 499, `client_gone`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_before_the_head_gets_its_line() {
    let hung = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend = format!("hung=http://{}", hung.local_addr().unwrap());
    // Accepts, holds every connection, answers nothing.
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = hung.accept().await {
            held.push(socket);
        }
    });
    let args = ["--backend", &backend, "--probe", "openai", "--no-placement"];
    let mut gateway = crate::binary::start(&[&args[..], &["--access-log", "json"]].concat()).await;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let body = r#"{"model": "m", "messages": [{"role": "user", "content": "hi"}]}"#;
    let req = http::Request::post(format!("http://{}/v1/chat/completions", gateway.addr))
        .header("x-request-id", "gone-1")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    // Dropped unanswered: its connection closes.
    let sent = tokio::time::timeout(std::time::Duration::from_millis(500), client.request(req));
    assert!(
        sent.await.is_err(),
        "no head from a backend that never answers"
    );
    let line = gateway.line_starting("{").await;
    let entry: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(entry["id"], "gone-1", "{line}");
    assert_eq!(entry["status"], 499, "{line}");
    assert_eq!(entry["ended"], "client_gone", "{line}");
    assert_eq!(entry["model"], "m", "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_of_the_log_that_stops_reading_blocks_nothing() {
    // Its standard output is never read: the pipe (64 KiB) fills after a
    // few hundred lines. Writing lines in the request path, requests hung
    // there, and the exit after SIGTERM waited for the reader.
    let gateway = crate::binary::start_with_sims(2, &["--access-log", "text"]).await;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let long_name = "m".repeat(300);
    for i in 0..2_000 {
        // Some with a long model name: a longer line, cut to 256 bytes.
        let model = if i % 2 == 0 { "llama-3-8b" } else { &long_name };
        let uri = format!("http://{}/v2/models/{model}/ready", gateway.addr);
        let req = http::Request::get(uri).body(Full::default()).unwrap();
        let reply = tokio::time::timeout(Duration::from_secs(10), client.request(req));
        let reply = reply.await.unwrap_or_else(|_| panic!("request {i} hung"));
        let status = reply.unwrap().status().as_u16();
        assert!(matches!(status, 200 | 400 | 404), "request {i}: {status}");
    }
    let ready = http::Request::get(format!("http://{}/ready", gateway.admin))
        .body(Full::default())
        .unwrap();
    let ready = tokio::time::timeout(Duration::from_secs(10), client.request(ready));
    assert_eq!(
        ready.await.expect("readiness answers").unwrap().status(),
        200
    );
    let mut child = gateway.child;
    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status();
    assert!(killed.unwrap().success());
    let exited = tokio::time::timeout(Duration::from_secs(30), child.wait());
    let status = exited.await.expect("exits with its log unread").unwrap();
    assert!(status.success(), "{status}");
}
