//! The drain over real sockets, in front of simulated servers streaming
//! tokens: once it begins readiness answers 503 and a new connection is
//! refused, streams in flight finish with `[DONE]`, and what is still
//! open at the drain timeout ends with an SSE error event; the `gateway`
//! binary drains on SIGTERM and exits 0. Every wait is on a frame, an
//! answer, a refused connection or the process's exit.

use crate::gateway;

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use tokio::time::Instant;
use tower_model_balance_sim::{InferenceTimes, ServerConfig};

use crate::app::ServeConfig;
use gateway::Running;

/// A bound so that a broken drain fails the test instead of hanging it.
const BOUND: Duration = Duration::from_secs(20);

/// Two servers streaming a token every `decode`, the gateway in front,
/// served with `drain_timeout`.
async fn fleet(name: &str, decode: Duration, drain_timeout: Duration) -> Running {
    let server = ServerConfig::builder()
        .cold_load(Duration::from_millis(5))
        .inference(InferenceTimes::new(0, 1, 2).unwrap())
        .decode_time(decode)
        .build()
        .unwrap();
    let mut serve = ServeConfig::default();
    serve.drain_timeout = drain_timeout;
    gateway::start_served(name, 2, server, serve).await
}

/// Opens a stream of `tokens` and reads its first event.
async fn open(gw: &Running, tokens: u32) -> (Incoming, String) {
    let mut body = gw.open_stream("llama-3-8b", tokens).await;
    let first = read(&mut body, 1).await;
    (body, first)
}

async fn read(body: &mut Incoming, frames: usize) -> String {
    let mut text = String::new();
    let mut seen = 0;
    while seen < frames {
        let frame = tokio::time::timeout(BOUND, body.frame())
            .await
            .expect("a frame");
        match frame {
            None => break,
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    text.push_str(&String::from_utf8_lossy(&data));
                    seen += 1;
                }
            }
            Some(Err(error)) => panic!("a transport error instead of an event: {error}\n{text}"),
        }
    }
    text
}

/// Waits (bounded) until a connection to `addr` is refused.
async fn until_refused(addr: std::net::SocketAddr) {
    let started = Instant::now();
    while tokio::net::TcpStream::connect(addr).await.is_ok() {
        assert!(started.elapsed() < BOUND, "{addr} still accepts");
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_lets_streams_in_flight_finish_and_refuses_new_connections() {
    // 60 tokens 20 ms apart: over a second of generation each.
    let mut gw = fleet("drain", Duration::from_millis(20), BOUND).await;
    // Ready once the first probe is answered (not before: no backend
    // reached yet).
    gw.until_ready().await;
    let mut streams = Vec::new();
    for _ in 0..3 {
        streams.push(open(&gw, 60).await);
    }
    gw.shut_down();
    until_refused(gw.addr).await;
    assert_eq!(
        gw.admin_get("/ready").await.status,
        503,
        "readiness during the drain"
    );
    for (mut body, first) in streams {
        let rest = read(&mut body, usize::MAX).await;
        let text = first + &rest;
        let tokens = text.matches("chat.completion.chunk").count();
        assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
        assert!(!text.contains(r#"{"error""#), "{text}");
        assert!(tokens >= 60, "{tokens} chunks:\n{text}");
    }
    // Every stream done: the drain ends well before its timeout.
    let served = tokio::time::timeout(BOUND, &mut gw.server).await;
    served
        .expect("the drain ends once the streams did")
        .unwrap();
    assert!(!gw.drain.is_cut());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_still_open_at_the_drain_timeout_end_with_an_sse_error_event() {
    // 1,000 tokens 20 ms apart (20 s) against a drain of 1 s.
    let mut gw = fleet("cut", Duration::from_millis(20), Duration::from_secs(1)).await;
    let (mut body, _) = open(&gw, 1_000).await;
    let began = Instant::now();
    gw.shut_down();
    let text = read(&mut body, usize::MAX).await;
    let cut_after = began.elapsed();
    let last = text.lines().rfind(|l| l.starts_with("data: ")).unwrap();
    assert!(last.contains(r#""code":"gateway_draining""#), "{last}");
    assert!(!text.contains("[DONE]"));
    assert!(
        cut_after >= Duration::from_secs(1),
        "cut after {cut_after:?}"
    );
    assert!(
        cut_after < Duration::from_secs(10),
        "cut after {cut_after:?}"
    );
    let served = tokio::time::timeout(BOUND, &mut gw.server).await;
    served.expect("serving ends after the cut").unwrap();
    assert!(gw.drain.is_cut());
}

/// The `gateway` binary: SIGTERM begins its drain, a stream in flight
/// finishes with `[DONE]`, and it exits 0, saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_the_binary_which_exits_0() {
    let mut gateway = crate::binary::start_with_sims(2, &["--drain-timeout", "20"]).await;
    let (addr, admin) = (gateway.addr, gateway.admin);
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    // The simulated servers decode a token every 5 ms: 400 tokens, 2 s.
    let body = r#"{"model": "llama-3-8b", "stream": true, "max_tokens": 400, "messages": [{"role": "user", "content": "hi"}]}"#;
    let req = http::Request::post(format!("http://{addr}/v1/chat/completions"))
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let response = tokio::time::timeout(BOUND, client.request(req))
        .await
        .unwrap()
        .unwrap();
    let mut stream = response.into_body();
    let first = read(&mut stream, 1).await;
    let pid = gateway.child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    until_refused(addr).await;
    let ready = http::Request::get(format!("http://{admin}/ready"))
        .body(Full::default())
        .unwrap();
    let ready = tokio::time::timeout(BOUND, client.request(ready))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ready.status(), 503);
    let text = first + &read(&mut stream, usize::MAX).await;
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let status = tokio::time::timeout(BOUND, gateway.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}");
    let mut said = Vec::new();
    while let Ok(Some(line)) = gateway.stderr.next_line().await {
        said.push(line);
    }
    assert!(
        said.iter().any(|l| l.starts_with("SIGTERM: draining")),
        "{said:?}"
    );
    assert!(said.iter().any(|l| l.starts_with("drained in")), "{said:?}");
}
