//! Streamed answers through the gateway's app over real sockets,
//! in front of simulated OpenAI-compatible servers that stream server-sent
//! events: tokens pass through as they come, a client that leaves frees
//! the server's slot, a stream cut before its first token is retried on
//! another backend (and one cut after it is not), and an error inside a
//! `200` stream counts against its backend. Every wait is on a frame, a
//! response or the servers' counters; time is asserted only where it is
//! the point (a slot freed within 100 ms).

use crate::gateway;

use std::time::Duration;

use bytes::Bytes;
use http::header;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use tokio::time::Instant;
use tower_model_balance_sim::{Fault, InferenceTimes, ServerConfig};

use gateway::{start_with, Running};

/// A bound so that a broken stack fails the test instead of hanging it.
const BOUND: Duration = Duration::from_secs(10);

/// `n` fast servers (1–2 ms prefill, 5 ms cold load) streaming a token
/// every `decode`, and the gateway in front of them.
async fn fleet(name: &str, n: usize, decode: Duration) -> Running {
    let config = ServerConfig::builder()
        .cold_load(Duration::from_millis(5))
        .inference(InferenceTimes::new(0, 1, 2).unwrap())
        .decode_time(decode)
        .build()
        .unwrap();
    start_with(name, n, config, |_| {}).await
}

fn chat(model: &str, tokens: u32) -> String {
    format!(
        r#"{{"model": "{model}", "stream": true, "max_tokens": {tokens}, "messages": [{{"role": "user", "content": "hi"}}]}}"#
    )
}

/// Sends a streamed chat request for `model` through the gateway; the
/// response, its body unread.
async fn open(gw: &Running, model: &str, tokens: u32) -> http::Response<Incoming> {
    let req = http::Request::post(format!("http://{}/v1/chat/completions", gw.addr))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(chat(model, tokens))))
        .unwrap();
    tokio::time::timeout(BOUND, gw.client.request(req))
        .await
        .expect("a head within the bound")
        .unwrap()
}

/// The next data frame's text; `None` at the end; `Err` for a body error.
async fn next(body: &mut Incoming) -> Option<Result<String, String>> {
    loop {
        let frame = tokio::time::timeout(BOUND, body.frame())
            .await
            .expect("a frame within the bound")?;
        match frame {
            Ok(frame) => {
                if let Ok(data) = frame.into_data() {
                    return Some(Ok(String::from_utf8_lossy(&data).into_owned()));
                }
            }
            Err(error) => return Some(Err(error.to_string())),
        }
    }
}

/// Token events in `text` (`data:` lines other than `[DONE]`).
fn tokens(text: &str) -> usize {
    text.lines()
        .filter(|l| l.starts_with("data: ") && !l.starts_with("data: [DONE]"))
        .filter(|l| !l.starts_with(r#"data: {"error""#))
        .count()
}

fn total(gw: &Running, stat: impl Fn(&tower_model_balance_sim::ServerStats) -> u64) -> u64 {
    gw.sims.iter().map(|s| stat(&s.stats())).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_pass_through_as_they_come() {
    // 40 tokens 25 ms apart: a second of generation after the first.
    let gw = fleet("pass", 2, Duration::from_millis(25)).await;
    let response = open(&gw, "llama-3-8b", 40).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "text/event-stream"
    );
    let mut body = response.into_body();
    let first = next(&mut body).await.unwrap().unwrap();
    assert!(first.starts_with("data: {"), "{first}");
    // The first event is here before the server wrote the last: nothing
    // on the way buffered the stream.
    let written = total(&gw, |s| s.tokens_sent);
    assert!(written < 40, "{written} of 40 written when the first came");
    let mut text = first;
    while let Some(frame) = next(&mut body).await {
        text.push_str(&frame.unwrap());
    }
    assert_eq!(tokens(&text), 40, "{text}");
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    assert_eq!(total(&gw, |s| s.streams_completed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_frees_the_servers_slot() {
    // A long generation: 1 000 tokens 20 ms apart (20 s).
    let gw = fleet("leave", 2, Duration::from_millis(20)).await;
    let response = open(&gw, "llama-3-8b", 1_000).await;
    let mut body = response.into_body();
    next(&mut body).await.unwrap().unwrap();
    let serving = gw
        .sims
        .iter()
        .find(|s| s.stats().running == 1)
        .expect("one server streams");
    let left = Instant::now();
    drop(body);
    let seen = tokio::time::timeout(
        BOUND,
        serving.wait_for_stats(|s| s.streams_cancelled == 1 && s.running == 0),
    )
    .await
    .expect("the server saw the client leave");
    let freed = left.elapsed();
    assert!(seen.tokens_sent < 1_000, "it stopped generating");
    assert!(
        freed < Duration::from_millis(100),
        "slot freed after {freed:?}"
    );
    eprintln!(
        "gateway-stream: client left after 1 token; slot freed {:.1} ms later, {} tokens generated",
        freed.as_secs_f64() * 1e3,
        seen.tokens_sent
    );
    // The balancer counted it done, not failed.
    let handle = &gw.handle;
    let wait = async {
        while handle.in_flight() > 0 {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(BOUND, wait).await.unwrap();
    assert!(handle.backends().iter().all(|b| b.failures == 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_before_its_first_token_is_retried_elsewhere() {
    let gw = fleet("failover", 3, Duration::from_millis(1)).await;
    gw.sims[0].set_fault(Some(Fault::StreamCut { after_tokens: 0 }));
    // Models spread over the ring: some land first on a cutting server.
    for i in 0..12 {
        let model = format!("m{i}");
        let response = open(&gw, &model, 3).await;
        assert_eq!(response.status(), 200, "{model}");
        let mut text = String::new();
        let mut body = response.into_body();
        while let Some(frame) = next(&mut body).await {
            text.push_str(&frame.unwrap_or_else(|e| panic!("{model}: {e}")));
        }
        assert_eq!(tokens(&text), 3, "{model}: {text}");
    }
    let cut = gw.sims[0].stats().streams;
    assert!(cut >= 1, "some first attempts went to the cutting server");
    let whole: u64 = gw.sims[1..]
        .iter()
        .map(|s| s.stats().streams_completed)
        .sum();
    assert_eq!(whole, 12, "each answered whole by another");
    eprintln!(
        "gateway-stream: {cut} of 12 streams cut before their first token, each retried elsewhere"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_after_its_first_token_is_not_retried() {
    let gw = fleet("after", 2, Duration::from_millis(1)).await;
    for sim in &gw.sims {
        sim.set_fault(Some(Fault::StreamCut { after_tokens: 2 }));
    }
    let response = open(&gw, "llama-3-8b", 5).await;
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut text = String::new();
    let mut failed = None;
    while let Some(frame) = next(&mut body).await {
        match frame {
            Ok(t) => text.push_str(&t),
            Err(e) => failed = Some(e),
        }
    }
    assert_eq!(tokens(&text), 2, "{text}");
    // The client sees the cut: an SSE error event, no `[DONE]`, as the
    // stream's last event (not a bare EOF or a transport error).
    assert!(failed.is_none(), "{failed:?}");
    let last = text.lines().rfind(|l| l.starts_with("data: ")).unwrap();
    assert!(last.contains(r#""code":"stream_failed""#), "{text}");
    assert!(!text.contains("[DONE]"), "{text}");
    assert_eq!(total(&gw, |s| s.streams), 1, "sent once, never again");
    assert_eq!(gw.hedge.stats().hedges, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_inside_a_200_stream_counts_against_its_backend() {
    let gw = fleet("error", 1, Duration::from_millis(1)).await;
    gw.sims[0].set_fault(Some(Fault::StreamError { after_tokens: 2 }));
    let response = open(&gw, "llama-3-8b", 5).await;
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut text = String::new();
    while let Some(frame) = next(&mut body).await {
        text.push_str(&frame.unwrap());
    }
    assert!(
        text.contains("\"error\""),
        "the client gets the event: {text}"
    );
    let failures = gw.handle.backends()[0].failures;
    assert_eq!(failures, 1, "a 200 with an error event is a failure");
    // A whole stream, for contrast, is not.
    gw.sims[0].set_fault(None);
    let response = open(&gw, "llama-3-8b", 5).await;
    let mut body = response.into_body();
    while next(&mut body).await.is_some() {}
    let b = &gw.handle.backends()[0];
    assert_eq!(b.failures, 1);
    assert_eq!(b.streams, 1, "the whole stream's TTFT and TPOT recorded");
    assert!(b.ttft_p50_ms.is_some() && b.tpot_mean_ms.is_some(), "{b:?}");
}
