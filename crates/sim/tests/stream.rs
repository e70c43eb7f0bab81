//! Streamed answers over a real socket on 127.0.0.1: server-sent events
//! written one body frame at a time, the serving slot held by the body
//! until it ends or the client drops it, and the streaming faults.
//!
//! Timing is asserted only where it is the point (a dropped stream seen at
//! once, a first token not slowed), against bounds far from the figures
//! the server is configured with; every other wait is on an event: a frame
//! read, or [`ModelServer::wait_for_stats`].

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use tokio::time::Instant;
use tower_model_balance_sim::{
    protocol, Fault, InferenceTimes, ModelServer, ServerConfig, ServerStats,
};

/// A bound so that a broken server fails the test instead of hanging it.
const BOUND: Duration = Duration::from_secs(10);

type HttpClient = Client<HttpConnector, Full<Bytes>>;

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

/// A fast server (1-2 ms prefill, 5 ms cold load) with `decode` between
/// tokens and `concurrency` slots.
async fn server(decode: Duration, concurrency: usize) -> ModelServer {
    let config = ServerConfig::builder()
        .cold_load(Duration::from_millis(5))
        .inference(InferenceTimes::new(0, 1, 2).unwrap())
        .decode_time(decode)
        .stream_tokens(3)
        .concurrency(concurrency)
        .build()
        .unwrap();
    ModelServer::start("node-0", config).await.unwrap()
}

fn chat(tokens: u32) -> String {
    format!(
        r#"{{"model": "llama-3-8b", "stream": true, "max_tokens": {tokens}, "messages": [{{"role": "user", "content": "hi"}}]}}"#
    )
}

/// Sends `body` to `path` and returns the response, its body unread.
async fn open(
    client: &HttpClient,
    server: &ModelServer,
    path: &str,
    body: &str,
) -> http::Response<Incoming> {
    let req = http::Request::post(format!("http://{}{path}", server.addr()))
        .body(Full::from(body.to_owned()))
        .unwrap();
    tokio::time::timeout(BOUND, client.request(req))
        .await
        .expect("answered in time")
        .expect("a response")
}

/// The next data frame of `body` as text: `None` at its end, `Err` when
/// the connection broke.
async fn frame(body: &mut Incoming) -> Option<Result<String, hyper::Error>> {
    loop {
        let frame = tokio::time::timeout(BOUND, body.frame())
            .await
            .expect("a frame in time")?;
        match frame {
            Ok(frame) => {
                if let Ok(data) = frame.into_data() {
                    return Some(Ok(String::from_utf8(data.to_vec()).unwrap()));
                }
            }
            Err(error) => return Some(Err(error)),
        }
    }
}

/// The JSON of one `data: …\n\n` event.
fn event(text: &str) -> serde_json::Value {
    let data = text
        .strip_prefix("data: ")
        .and_then(|t| t.strip_suffix("\n\n"))
        .unwrap_or_else(|| panic!("one event: {text:?}"));
    serde_json::from_str(data).unwrap_or_else(|_| panic!("JSON: {text:?}"))
}

async fn wait(server: &ModelServer, done: impl Fn(&ServerStats) -> bool) -> ServerStats {
    tokio::time::timeout(BOUND, server.wait_for_stats(done))
        .await
        .expect("the stats in time")
}

#[tokio::test]
async fn a_stream_sends_one_event_per_frame_then_done() {
    let server = server(Duration::from_millis(20), 4).await;
    let rsp = open(
        &client(),
        &server,
        protocol::CHAT_COMPLETIONS_PATH,
        &chat(5),
    )
    .await;
    assert_eq!(rsp.status(), 200);
    let headers = rsp.headers();
    assert_eq!(headers[http::header::CONTENT_TYPE], "text/event-stream");
    assert_eq!(headers[protocol::COLD_LOAD_HEADER], "true");
    assert_eq!(headers[protocol::BACKEND_HEADER], "node-0");
    assert_eq!(headers[protocol::RESIDENT_MODELS_HEADER], "llama-3-8b");
    let mut body = rsp.into_body();

    let first = frame(&mut body).await.unwrap().unwrap();
    // Read while the server has yet to write the last token: written as
    // produced, not buffered.
    let stats = server.stats();
    assert!(stats.tokens_sent < 5, "{stats:?}");
    assert_eq!((stats.streams, stats.running), (1, 1));
    let chunk = event(&first);
    assert_eq!(chunk["object"], "chat.completion.chunk");
    assert_eq!(chunk["model"], "llama-3-8b");
    assert_eq!(chunk["choices"][0]["delta"]["content"], "tok ");
    assert!(chunk["choices"][0]["finish_reason"].is_null());

    let mut events = vec![first];
    while let Some(next) = frame(&mut body).await {
        events.push(next.unwrap());
    }
    assert_eq!(events.len(), 6, "5 tokens and [DONE]: {events:?}");
    assert_eq!(events[5], "data: [DONE]\n\n");
    let last = event(&events[4]);
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    for middle in &events[1..4] {
        assert!(event(middle)["choices"][0]["finish_reason"].is_null());
    }
    let stats = wait(&server, |s| s.streams_completed == 1 && s.running == 0).await;
    assert_eq!((stats.tokens_sent, stats.streams_cancelled), (5, 0));
}

#[tokio::test]
async fn completions_stream_text_and_default_to_stream_tokens() {
    let server = server(Duration::from_millis(1), 4).await;
    let body = r#"{"model": "m", "prompt": "hi", "stream": true}"#;
    let rsp = open(&client(), &server, protocol::COMPLETIONS_PATH, body).await;
    assert_eq!(
        rsp.headers()[http::header::CONTENT_TYPE],
        "text/event-stream"
    );
    let mut body = rsp.into_body();
    let mut events = Vec::new();
    while let Some(next) = frame(&mut body).await {
        events.push(next.unwrap());
    }
    assert_eq!(events.len(), 4, "stream_tokens(3) and [DONE]: {events:?}");
    for token in &events[..3] {
        let chunk = event(token);
        assert_eq!(chunk["object"], "text_completion");
        assert_eq!(chunk["choices"][0]["text"], "tok ");
    }
    assert_eq!(events[3], "data: [DONE]\n\n");

    // Without `"stream": true`, and on embeddings, the answer is whole.
    for (path, body) in [
        (
            protocol::COMPLETIONS_PATH,
            r#"{"model": "m", "prompt": "hi"}"#,
        ),
        (
            protocol::EMBEDDINGS_PATH,
            r#"{"model": "m", "stream": true}"#,
        ),
    ] {
        let rsp = open(&client(), &server, path, body).await;
        assert_eq!(
            rsp.headers()[http::header::CONTENT_TYPE],
            "application/json"
        );
    }
    assert_eq!(server.stats().streams, 1);
}

#[tokio::test]
async fn a_dropped_stream_gives_its_slot_back_at_once() {
    // One slot: a second request waits for the stream to let it go.
    let server = server(Duration::from_millis(10), 1).await;
    let client = client();
    let rsp = open(
        &client,
        &server,
        protocol::CHAT_COMPLETIONS_PATH,
        &chat(1000),
    )
    .await;
    let mut body = rsp.into_body();
    frame(&mut body).await.unwrap().unwrap();
    frame(&mut body).await.unwrap().unwrap();

    let second = tokio::spawn({
        let (client, uri) = (client.clone(), server.addr());
        async move {
            let req = http::Request::post(format!("http://{uri}{}", protocol::COMPLETIONS_PATH))
                .body(Full::from(r#"{"model": "llama-3-8b", "prompt": "x"}"#))
                .unwrap();
            client.request(req).await.map(|r| r.status())
        }
    });
    let stats = wait(&server, |s| s.waiting == 1).await;
    assert_eq!(stats.running, 1, "the stream holds the only slot");

    drop(body);
    let dropped = Instant::now();
    let stats = wait(&server, |s| s.streams_cancelled == 1).await;
    let took = dropped.elapsed();
    assert!(took < Duration::from_millis(100), "seen after {took:?}");
    assert_eq!(stats.streams_completed, 0);
    let status = tokio::time::timeout(BOUND, second).await.unwrap().unwrap();
    assert_eq!(status.unwrap(), 200, "served once the slot was back");
    let stats = wait(&server, |s| s.running == 0 && s.waiting == 0).await;
    assert!(stats.tokens_sent < 1000, "{stats:?}");
}

#[tokio::test]
async fn a_dropped_stream_is_seen_without_another_request() {
    let server = server(Duration::from_millis(10), 4).await;
    let rsp = open(
        &client(),
        &server,
        protocol::CHAT_COMPLETIONS_PATH,
        &chat(1000),
    )
    .await;
    let mut body = rsp.into_body();
    frame(&mut body).await.unwrap().unwrap();
    drop(body);
    let dropped = Instant::now();
    let stats = wait(&server, |s| s.streams_cancelled == 1 && s.running == 0).await;
    let took = dropped.elapsed();
    assert!(took < Duration::from_millis(100), "seen after {took:?}");
    assert_eq!((stats.streams, stats.streams_completed), (1, 0));
}

#[tokio::test]
async fn a_stream_error_is_a_vllm_error_event_without_done() {
    let server = server(Duration::from_millis(1), 4).await;
    server.set_fault(Some(Fault::StreamError { after_tokens: 2 }));
    let rsp = open(
        &client(),
        &server,
        protocol::CHAT_COMPLETIONS_PATH,
        &chat(5),
    )
    .await;
    assert_eq!(rsp.status(), 200);
    let mut body = rsp.into_body();
    let mut events = Vec::new();
    while let Some(next) = frame(&mut body).await {
        events.push(next.expect("the body ends normally"));
    }
    assert_eq!(events.len(), 3, "2 tokens and the error: {events:?}");
    for token in &events[..2] {
        assert_eq!(event(token)["choices"][0]["delta"]["content"], "tok ");
    }
    let error = event(&events[2]);
    assert_eq!(error["error"]["type"], "InternalServerError");
    assert_eq!(error["error"]["code"], 500);
    assert!(error["error"]["param"].is_null());
    assert!(error["error"]["message"].is_string());
    let stats = wait(&server, |s| s.streams_completed == 1 && s.running == 0).await;
    assert_eq!(stats.tokens_sent, 2);

    // A whole answer is served as usual.
    let whole = r#"{"model": "llama-3-8b", "messages": []}"#;
    let rsp = open(&client(), &server, protocol::CHAT_COMPLETIONS_PATH, whole).await;
    let bytes = rsp.into_body().collect().await.unwrap().to_bytes();
    let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(value["object"], "chat.completion");
}

#[tokio::test]
async fn a_stream_cut_breaks_the_connection_after_its_tokens() {
    let server = server(Duration::from_millis(1), 4).await;
    for (fault, tokens, kept) in [
        (Fault::StreamCut { after_tokens: 2 }, 5, 2),
        (Fault::StreamCut { after_tokens: 0 }, 5, 0),
        (Fault::Reset, 6, 3),
    ] {
        server.set_fault(Some(fault));
        let before = server.stats();
        let rsp = open(
            &client(),
            &server,
            protocol::CHAT_COMPLETIONS_PATH,
            &chat(tokens),
        )
        .await;
        assert_eq!(rsp.status(), 200, "{fault:?}");
        let mut body = rsp.into_body();
        let mut events = 0;
        let end = loop {
            match frame(&mut body).await {
                Some(Ok(text)) => {
                    assert_eq!(event(&text)["choices"][0]["delta"]["content"], "tok ");
                    events += 1;
                }
                other => break other,
            }
        };
        assert!(matches!(end, Some(Err(_))), "{fault:?}: cut, got {end:?}");
        assert_eq!(events, kept, "{fault:?}");
        let done = before.streams_completed + 1;
        let stats = wait(&server, |s| s.streams_completed == done && s.running == 0).await;
        assert_eq!(stats.tokens_sent - before.tokens_sent, kept as u64);
    }
}

#[tokio::test]
async fn slow_decode_slows_every_token_but_the_first() {
    let decode = Duration::from_millis(10);
    let server = server(decode, 4).await;
    let client = client();
    // Warm the model: the cold load is not what is measured.
    let warm = r#"{"model": "llama-3-8b", "messages": []}"#;
    let rsp = open(&client, &server, protocol::CHAT_COMPLETIONS_PATH, warm).await;
    rsp.into_body().collect().await.unwrap();

    server.set_fault(Some(Fault::SlowDecode { factor: 40 }));
    let sent = Instant::now();
    let rsp = open(&client, &server, protocol::CHAT_COMPLETIONS_PATH, &chat(3)).await;
    let mut body = rsp.into_body();
    frame(&mut body).await.unwrap().unwrap();
    let first = sent.elapsed();
    frame(&mut body).await.unwrap().unwrap();
    let gap = sent.elapsed() - first;
    // The prefill is 1-2 ms; a slowed step is 400 ms.
    assert!(
        first < Duration::from_millis(200),
        "first token after {first:?}"
    );
    assert!(gap >= decode * 40, "second token {gap:?} after the first");
    drop(body);
    wait(&server, |s| s.running == 0 && s.streams_cancelled == 1).await;

    // A whole answer is not slowed.
    let sent = Instant::now();
    let rsp = open(&client, &server, protocol::CHAT_COMPLETIONS_PATH, warm).await;
    rsp.into_body().collect().await.unwrap();
    assert!(sent.elapsed() < Duration::from_millis(200));
}
