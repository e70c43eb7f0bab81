//! The gateway's bounds over real sockets: requests in flight past the
//! limit get a 503 with `Retry-After`; JSON routes have a body limit of
//! their own; connections past the limit wait, and a connection holding
//! no request is closed at the header timeout; `/metrics` answers on the
//! admin listener only; an error names no backend address.

use crate::gateway;

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower_model_balance::backend::BackendId;
use tower_model_balance::endpoint::Origin;
use tower_model_balance_sim::{InferenceTimes, ServerConfig};

use gateway::{start, start_with};

fn chat(stream: bool) -> String {
    format!(
        r#"{{"model": "m", "stream": {stream}, "max_tokens": 5, "messages": [{{"role": "user", "content": "hi"}}]}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_requests_in_flight_a_503_with_retry_after() {
    // Answers take 2 s: the first is in flight while the second comes.
    let server = ServerConfig::builder()
        .inference(InferenceTimes::new(0, 2_000, 2_000).unwrap())
        .build()
        .unwrap();
    let gw = start_with("inflight", 1, server, |c| c.max_requests = 1).await;
    let first = gw.post("/v1/chat/completions", chat(false));
    let second = async {
        // Sent once the first is in flight on the server.
        let sent = tokio::time::Instant::now();
        while gw.sims[0].stats().work == 0 {
            assert!(sent.elapsed() < Duration::from_secs(10), "never sent");
            tokio::task::yield_now().await;
        }
        gw.post("/v1/chat/completions", chat(false)).await
    };
    let (first, second) = tokio::join!(first, second);
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(second.status, 503, "{}", second.body);
    assert_eq!(second.json()["error"]["code"], "gateway_overloaded");
    assert_eq!(second.headers["retry-after"], "1");
    // The slot came back with the first answer's end.
    assert_eq!(
        gw.post("/v1/chat/completions", chat(false)).await.status,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_routes_have_a_body_limit_of_their_own() {
    let gw = start("bodies", 1, |c| {
        c.json_body_limit = 1024;
        c.body_limit = 64 * 1024;
    })
    .await;
    let padding = "x".repeat(2048);
    let big_chat =
        format!(r#"{{"model": "m", "messages": [{{"role": "user", "content": "{padding}"}}]}}"#);
    let reply = gw.post("/v1/chat/completions", big_chat).await;
    assert_eq!(reply.status, 413, "{}", reply.body);
    let tensor = format!(
        r#"{{"inputs": [{{"name": "t", "datatype": "BYTES", "shape": [1], "data": ["{padding}"]}}]}}"#
    );
    let reply = gw.post("/v2/models/m/infer", tensor).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_answer_on_the_admin_listener_only() {
    let gw = start("admin", 1, |_| {}).await;
    assert_eq!(gw.get("/metrics").await.status, 404);
    let scrape = gw.admin_get("/metrics").await;
    assert_eq!(scrape.status, 200);
    assert!(scrape.body.contains("model_balance_"), "{}", scrape.body);
    for path in ["/ready", "/health", "/v2/health/ready", "/live"] {
        assert_eq!(gw.admin_get(path).await.status, 200, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_names_no_backend_address() {
    // A backend named by its origin, as `--backend URL` names it, and
    // gone: a port that was free a moment ago.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let origin = Origin::http(addr);
    let id = BackendId::new(&origin.to_string()).unwrap();
    // (With placement on, the load fails first: the 503's message is
    // checked in `app/errors/tests.rs`.)
    for placement in [false] {
        let mut config = crate::app::Config::new(vec![(id.clone(), origin.clone())]);
        config.placement = placement;
        let gw = gateway::serve(config, Vec::new()).await;
        let reply = gw.post("/v1/chat/completions", chat(false)).await;
        // Placement's load fails first (503), else the request (502).
        assert!(
            [502, 503].contains(&reply.status.as_u16()),
            "{}",
            reply.body
        );
        for leaked in [addr.to_string(), addr.port().to_string()] {
            assert!(!reply.body.contains(&leaked), "{leaked} in {}", reply.body);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_connection_bound_idle_connections_make_room_busy_ones_do_not() {
    let mut serve = crate::app::ServeConfig::default();
    serve.max_connections = 4;
    let server = ServerConfig::builder()
        .inference(InferenceTimes::new(0, 1_500, 1_500).unwrap())
        .build()
        .unwrap();
    let gw = gateway::start_served("conns", 1, server, serve).await;
    // Four kept-alive connections, each idle after a request, hold every
    // slot: the next client is served at once, one of them closed for it.
    let mut idle = Vec::new();
    for _ in 0..4 {
        let mut stream = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
        stream
            .write_all(b"GET /v2/health/live HTTP/1.1\r\nhost: g\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0; 256];
        let n = stream.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        idle.push(stream);
    }
    let started = tokio::time::Instant::now();
    assert_eq!(gw.get("/v2/health/live").await.status, 200);
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_millis(900),
        "served after {waited:?}"
    );
    let mut closed = 0;
    for mut stream in idle {
        let mut buf = [0; 16];
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf));
        if matches!(read.await, Ok(Ok(0)) | Ok(Err(_))) {
            closed += 1;
        }
    }
    assert!(closed >= 1, "no idle connection closed");
    // Four connections with a request in flight are never closed for a
    // fifth: it is, and the four are answered.
    let mut busy = Vec::new();
    for _ in 0..4 {
        let mut stream = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
        let body = chat(false);
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: g\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        busy.push(stream);
    }
    let sent = tokio::time::Instant::now();
    while gw.sims[0].stats().work < 4 {
        assert!(
            sent.elapsed() < Duration::from_secs(10),
            "{:?}",
            gw.sims[0].stats()
        );
        tokio::task::yield_now().await;
    }
    let mut fifth = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let _ = fifth
        .write_all(b"GET /v2/health/live HTTP/1.1\r\nhost: g\r\n\r\n")
        .await;
    let mut buf = [0; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), fifth.read(&mut buf));
    assert!(
        matches!(read.await, Ok(Ok(0)) | Ok(Err(_))),
        "the fifth is closed"
    );
    for mut stream in busy {
        let mut buf = [0; 64];
        let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf));
        let n = read.await.expect("answered").unwrap();
        let status = String::from_utf8_lossy(&buf[..n]).into_owned();
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    }
}
