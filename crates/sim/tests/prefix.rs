//! The prefix cache and the prefill engine over a real socket on
//! 127.0.0.1: cached tokens reported in `usage` and in the stats, a cache
//! hit's first token sooner, one prefill at a time per server, eviction
//! under a small capacity, and bad bodies served as without the cache.
//!
//! Waits are on events (a frame read, [`ModelServer::wait_for_stats`]);
//! times are asserted only as lower bounds the prefill engine's sleeps
//! guarantee, or against bounds tens of times the configured figures.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use tokio::time::Instant;
use tower_model_balance_sim::{protocol, ModelServer, ServerConfig, ServerStats};

const BOUND: Duration = Duration::from_secs(10);
/// Prompt tokens prefilled per second: 2 000 tokens take 200 ms.
const RATE: u64 = 10_000;

type HttpClient = Client<HttpConnector, Full<Bytes>>;

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

async fn server(cache_tokens: u64) -> ModelServer {
    let config = ServerConfig::builder()
        .cold_load(Duration::from_millis(1))
        .decode_time(Duration::from_millis(1))
        .prefix_cache(cache_tokens)
        .prefill_rate(RATE)
        .concurrency(8)
        .build()
        .unwrap();
    ModelServer::start("node-0", config).await.unwrap()
}

/// A streamed completion of `prompt` with a usage chunk.
fn streamed(prompt: &str) -> String {
    serde_json::json!({"model": "m", "prompt": prompt, "stream": true, "max_tokens": 2,
        "stream_options": {"include_usage": true}})
    .to_string()
}

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

/// Reads a stream to its end: when its first token came, and its usage.
async fn read_stream(rsp: http::Response<Incoming>) -> (Instant, serde_json::Value) {
    let mut body = rsp.into_body();
    let (mut first, mut text) = (None, String::new());
    while let Some(frame) = tokio::time::timeout(BOUND, body.frame())
        .await
        .expect("a frame in time")
    {
        let Ok(data) = frame.unwrap().into_data() else {
            continue;
        };
        let data = String::from_utf8(data.to_vec()).unwrap();
        if data.contains(r#""choices":[{"#) {
            first.get_or_insert_with(Instant::now);
        }
        text.push_str(&data);
    }
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let usage = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter_map(|e| serde_json::from_str::<serde_json::Value>(e).ok())
        .find(|e| e.get("usage").is_some())
        .expect("a usage chunk");
    assert_eq!(usage["choices"], serde_json::json!([]));
    (first.expect("a token"), usage["usage"].clone())
}

/// The `usage` of a whole (not streamed) completion of `prompt`.
async fn whole(client: &HttpClient, server: &ModelServer, prompt: &str) -> serde_json::Value {
    let body = serde_json::json!({"model": "m", "prompt": prompt, "max_tokens": 1}).to_string();
    let rsp = open(client, server, protocol::COMPLETIONS_PATH, &body).await;
    assert_eq!(rsp.status(), 200);
    let bytes = rsp.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice::<serde_json::Value>(&bytes).unwrap()["usage"].clone()
}

fn cached(usage: &serde_json::Value) -> u64 {
    usage["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap()
}

async fn wait(server: &ModelServer, done: impl Fn(&ServerStats) -> bool) -> ServerStats {
    tokio::time::timeout(BOUND, server.wait_for_stats(done))
        .await
        .expect("the stats in time")
}

#[tokio::test]
async fn a_shared_prefix_is_cached_and_its_first_token_comes_sooner() {
    let server = server(100_000).await;
    let client = client();
    // 2 000 tokens shared (125 blocks), then a tail of 10 tokens each.
    let shared = "abcdefgh".repeat(1_000);
    let (a, b) = (
        format!("{shared}{}", "x".repeat(40)),
        format!("{shared}{}", "y".repeat(40)),
    );

    let sent = Instant::now();
    let (first, usage) =
        read_stream(open(&client, &server, protocol::COMPLETIONS_PATH, &streamed(&a)).await).await;
    let cold_ttft = first - sent;
    assert_eq!(usage["prompt_tokens"], 2_010);
    assert_eq!(usage["completion_tokens"], 2);
    assert_eq!(usage["total_tokens"], 2_012);
    assert_eq!(cached(&usage), 0);
    // 2 010 tokens at 10 000 a second.
    assert!(cold_ttft >= Duration::from_millis(201), "{cold_ttft:?}");

    let sent = Instant::now();
    let (first, usage) =
        read_stream(open(&client, &server, protocol::COMPLETIONS_PATH, &streamed(&b)).await).await;
    let warm_ttft = first - sent;
    assert_eq!(cached(&usage), 2_000);
    // 10 uncached tokens: 1 ms of prefill, against 201 ms.
    assert!(warm_ttft < cold_ttft / 2, "{warm_ttft:?} vs {cold_ttft:?}");

    let stats = wait(&server, |s| s.streams_completed == 2).await;
    assert_eq!((stats.prompt_tokens, stats.cached_tokens), (4_020, 2_000));
    let rsp = client
        .get(format!("http://{}/metrics", server.addr()).parse().unwrap())
        .await
        .unwrap();
    let text =
        String::from_utf8(rsp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    assert!(
        text.contains("vllm:prefix_cache_queries_total{engine=\"0\"} 4020\n"),
        "{text}"
    );
    assert!(
        text.contains("vllm:prefix_cache_hits_total{engine=\"0\"} 2000\n"),
        "{text}"
    );
}

#[tokio::test]
async fn whole_answers_report_usage_and_chat_prompts_are_their_messages() {
    let server = server(100_000).await;
    let client = client();
    let system = "s".repeat(640);
    let chat = |question: &str| {
        serde_json::json!({"model": "m", "max_tokens": 3, "messages": [
            {"role": "system", "content": system}, {"role": "user", "content": question}]})
        .to_string()
    };
    for (question, hit) in [("first", 0), ("second", 160)] {
        let rsp = open(
            &client,
            &server,
            protocol::CHAT_COMPLETIONS_PATH,
            &chat(question),
        )
        .await;
        let value: serde_json::Value =
            serde_json::from_slice(&rsp.into_body().collect().await.unwrap().to_bytes()).unwrap();
        let text = protocol::prompt_text(chat(question).as_bytes()).unwrap();
        assert_eq!(
            value["usage"]["prompt_tokens"],
            protocol::prompt_tokens(&text)
        );
        assert_eq!(value["usage"]["completion_tokens"], 3);
        // "system\n" + 640 bytes: 10 full blocks shared, the 11th holds the question.
        assert_eq!(cached(&value["usage"]), hit, "{question}");
    }
}

#[tokio::test]
async fn prefills_run_one_at_a_time() {
    let server = server(100_000).await;
    let client = client();
    // Two uncached prompts of 2 000 tokens: 200 ms of prefill each.
    let (a, b) = ("a".repeat(8_000), "b".repeat(8_000));
    let sent = Instant::now();
    let first = open(&client, &server, protocol::COMPLETIONS_PATH, &streamed(&a)).await;
    // The head comes once the slot is taken and the prefill queued.
    wait(&server, |s| s.streams == 1).await;
    let second = open(&client, &server, protocol::COMPLETIONS_PATH, &streamed(&b)).await;
    let (first_token, _) = read_stream(first).await;
    // When the first request's token came, the second's prefill had not
    // ended: only the first is counted.
    let stats = server.stats();
    assert_eq!(stats.prompt_tokens, 2_000, "{stats:?}");
    let (second_token, usage) = read_stream(second).await;
    assert_eq!(cached(&usage), 0);
    assert!(second_token > first_token);
    // Behind the first prefill: 200 ms + 200 ms, not 200 ms side by side.
    assert!(
        second_token - sent >= Duration::from_millis(400),
        "{:?}",
        second_token - sent
    );
    let stats = wait(&server, |s| s.streams_completed == 2).await;
    assert_eq!(stats.prompt_tokens, 4_000);
}

#[tokio::test]
async fn a_small_cache_evicts_a_prompts_tail_first() {
    // Six blocks of 16 tokens (64 bytes each).
    let server = server(6 * 16).await;
    let client = client();
    let (p, q) = ("p".repeat(4 * 64), "q".repeat(4 * 64));
    assert_eq!(cached(&whole(&client, &server, &p).await), 0);
    assert_eq!(cached(&whole(&client, &server, &p).await), 64);
    // Four more blocks: two of p's go, its tail.
    assert_eq!(cached(&whole(&client, &server, &q).await), 0);
    assert_eq!(cached(&whole(&client, &server, &p).await), 32);
    // That prefill put p's four blocks back, evicting q's tail: q keeps 2.
    assert_eq!(cached(&whole(&client, &server, &q).await), 32);
}

#[tokio::test]
async fn bodies_without_a_prompt_are_served_as_without_the_cache() {
    let server = server(100_000).await;
    let client = client();
    for body in [
        r#"{"model": "m"}"#,
        r#"{"model": "m", "messages": [{"role": "user", "content": 5}]}"#,
        r#"{"model": "m", "messages": "hi"}"#,
    ] {
        let rsp = open(&client, &server, protocol::CHAT_COMPLETIONS_PATH, body).await;
        assert_eq!(rsp.status(), 200, "{body}");
        let value: serde_json::Value =
            serde_json::from_slice(&rsp.into_body().collect().await.unwrap().to_bytes()).unwrap();
        assert_eq!(value["usage"]["prompt_tokens"], 0, "{body}");
    }
    let rsp = open(
        &client,
        &server,
        protocol::CHAT_COMPLETIONS_PATH,
        r#"{"messages": []}"#,
    )
    .await;
    assert_eq!(rsp.status(), 400);
    assert_eq!(server.stats().prompt_tokens, 0);
}
