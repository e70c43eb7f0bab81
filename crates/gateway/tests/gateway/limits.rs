//! The gateway's bounds over real sockets: requests in flight past the
//! limit get a 503 with `Retry-After`; JSON routes have a body limit of
//! their own; `/metrics` answers on the admin listener only; an error
//! names no backend address; a body counts against the bound on bytes held
//! as it arrives, not as announced. The connection bound: `connections.rs`.

use crate::gateway;

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tower_model_balance::backend::BackendId;
use tower_model_balance::endpoint::Origin;
use tower_model_balance_sim::{InferenceTimes, ServerConfig};

use gateway::{start, start_with};

/// A bound so that a broken bound fails the test instead of hanging it.
const BOUND: Duration = Duration::from_secs(20);

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
    // Ready once the first probe is answered (not before: no backend
    // reached yet).
    gw.until_ready().await;
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

/// The gateway's gauge of request-body bytes held now (every gateway in
/// the process: the tests beside this one may add to it).
async fn held(gw: &gateway::Running) -> f64 {
    let scrape = gw.admin_get("/metrics").await;
    let series = "gateway_request_body_bytes_held ";
    let line = scrape.body.lines().find_map(|l| l.strip_prefix(series));
    line.map_or(0.0, |value| value.trim().parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_count_against_the_bound_as_they_arrive_not_as_announced() {
    // Room for 256 KiB of bodies in all. Two clients announce 128 KiB
    // each and send 1 KiB: reserved as announced, they would hold it all
    // and every other request would read 503 until their body timeout.
    let gw = start("held", 1, |c| {
        c.max_buffered_bytes = 256 * 1024;
        c.body_limit = 128 * 1024;
    })
    .await;
    let mut body = r#"{"inputs":[]}"#.to_owned();
    body.push_str(&" ".repeat(128 * 1024 - body.len()));
    let mut slow = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(gw.addr).await.unwrap();
        let head = format!(
            "POST /v2/models/m/infer HTTP/1.1\r\nhost: g\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(&body.as_bytes()[..1024]).await.unwrap();
        slow.push(stream);
    }
    // Their first KiB each held (bounded).
    let started = Instant::now();
    while held(&gw).await < 2048.0 {
        assert!(started.elapsed() < BOUND, "the two bodies never held");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let reply = gw.post("/v1/chat/completions", chat(false)).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    // The rest of each: both fit, and are answered.
    for stream in &mut slow {
        stream.write_all(&body.as_bytes()[1024..]).await.unwrap();
        let mut head = [0; 12];
        let read = tokio::time::timeout(BOUND, stream.read_exact(&mut head));
        read.await.expect("an answer").unwrap();
        assert_eq!(&head, b"HTTP/1.1 200", "{}", String::from_utf8_lossy(&head));
    }
}
