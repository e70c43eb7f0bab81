//! The timeouts per phase over real sockets, in front of simulated
//! servers: a stream that stalls ends at the idle timeout with an SSE
//! error event and counts against its backend; a non-streamed generation
//! longer than the first-token and idle timeouts goes through; the
//! request's total answers 504 and counts against no backend; a stream
//! whose first token never comes is a 504 counted against its backend.

use crate::gateway;

use std::time::Duration;

use bytes::Bytes;
use http::header;
use http_body_util::{BodyExt, Full};
use tower_model_balance_sim::{Fault, InferenceTimes, ServerConfig};

use gateway::{start_with, Running};

/// One server (answers sent whole after `inference` ms, a token streamed
/// every 10 ms), behind a gateway whose first-token and idle timeouts are
/// 1 s and whose request timeout is `request`.
async fn fleet(name: &str, inference: u64, request: Duration) -> Running {
    let server = ServerConfig::builder()
        .cold_load(Duration::from_millis(5))
        .inference(InferenceTimes::new(0, inference, inference).unwrap())
        .decode_time(Duration::from_millis(10))
        .build()
        .unwrap();
    start_with(name, 1, server, |c| {
        c.timeouts.first_token = Duration::from_secs(1);
        c.timeouts.idle = Duration::from_secs(1);
        c.timeouts.request = request;
    })
    .await
}

fn chat(stream: bool, tokens: u32) -> String {
    format!(
        r#"{{"model": "m", "stream": {stream}, "max_tokens": {tokens}, "messages": [{{"role": "user", "content": "hi"}}]}}"#
    )
}

/// The failures the balancer counted against the one backend.
fn failures(gw: &Running) -> u64 {
    gw.handle.backends()[0].failures
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_stream_ends_at_the_idle_timeout_with_an_sse_error_event_and_counts() {
    let gw = fleet("stall", 1, Duration::from_secs(60)).await;
    // A token every 10 ms × 1,000: 10 s between tokens after the first.
    gw.sims[0].set_fault(Some(Fault::SlowDecode { factor: 1_000 }));
    let req = http::Request::post(format!("http://{}/v1/chat/completions", gw.addr))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(chat(true, 5))))
        .unwrap();
    let response = gw.client.request(req).await.unwrap();
    assert_eq!(response.status(), 200);
    let read = response.into_body().collect();
    let text = tokio::time::timeout(Duration::from_secs(8), read)
        .await
        .expect("cut at the idle timeout, not at the next token")
        .expect("an event, not a transport error")
        .to_bytes();
    let text = String::from_utf8_lossy(&text);
    let last = text.lines().rfind(|l| l.starts_with("data: ")).unwrap();
    assert!(last.contains(r#""code":"backend_stalled""#), "{text}");
    assert!(!text.contains("[DONE]"), "{text}");
    assert_eq!(failures(&gw), 1, "the stall counts against the backend");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_streamed_generation_longer_than_the_first_token_and_idle_timeouts_goes_through() {
    // 2.5 s to the head (the whole answer), against 1 s timeouts.
    let gw = fleet("long", 2_500, Duration::from_secs(60)).await;
    let reply = gw.post("/v1/chat/completions", chat(false, 5)).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(failures(&gw), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_timeout_is_a_504_counted_against_no_backend() {
    let gw = fleet("total", 3_000, Duration::from_secs(1)).await;
    for _ in 0..4 {
        let reply = gw.post("/v1/chat/completions", chat(false, 5)).await;
        assert_eq!(reply.status, 504, "{}", reply.body);
        assert_eq!(reply.json()["error"]["code"], "request_timeout");
    }
    // Four in a row (three open the gateway's breakers): none counted.
    assert_eq!(failures(&gw), 0);
    assert_eq!(gw.handle.stats().breaker_trips, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_without_a_first_token_in_time_is_a_504_counted_against_its_backend() {
    let gw = fleet("ttft", 1, Duration::from_secs(60)).await;
    gw.sims[0].set_fault(Some(Fault::Hang));
    let reply = gw.post("/v1/chat/completions", chat(true, 5)).await;
    assert_eq!(reply.status, 504, "{}", reply.body);
    assert_eq!(reply.json()["error"]["code"], "first_token_timeout");
    assert_eq!(failures(&gw), 1);
}
