//! The connections the gateway closes itself, over real sockets, each
//! counted on the admin listener's `/metrics`: at the connection bound,
//! idle kept-alive connections are closed to make room
//! (`idle_for_room`), and with every connection busy a new one reads a
//! 503 `gateway_overloaded` with `Retry-After` (`connection_limit`) while
//! the busy ones go on — a burst of them all within one wait for room,
//! not one a wait, and those waiting at the drain's start at once; a
//! connection that sends half a request head is
//! closed at the header timeout (`header_timeout`). Each gateway serves
//! under a `listener` label of its own, so that the tests running beside
//! it in the process (one recorder for all) do not move its counts. Waits
//! are on answers, closes and counts, never on a sleep alone.

use crate::gateway;

use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tower_model_balance_sim::{InferenceTimes, ServerConfig};

use crate::app::ServeConfig;
use gateway::Running;

/// A bound so that a broken close fails the test instead of hanging it:
/// what it bounds takes at most the 1 s wait for room.
const BOUND: Duration = Duration::from_secs(10);

/// One server streaming a token every 20 ms, the gateway in front, served
/// with at most `max` connections, the header timeout `header`, under
/// the label `listener`.
async fn fleet(listener: &'static str, max: usize, header: Duration) -> Running {
    let server = ServerConfig::builder()
        .cold_load(Duration::from_millis(5))
        .inference(InferenceTimes::new(0, 1, 2).unwrap())
        .decode_time(Duration::from_millis(20))
        .build()
        .unwrap();
    let mut serve = ServeConfig::default();
    serve.max_connections = max;
    serve.header_timeout = header;
    serve.listener = listener;
    gateway::start_served(listener, 1, server, serve).await
}

/// The value of `series` whose labels include each of `labels` on the
/// gateway's `/metrics`; 0 while it has none.
async fn scraped(gw: &Running, series: &str, labels: &[(&str, &str)]) -> f64 {
    let scrape = gw.admin_get("/metrics").await;
    for line in scrape.body.lines() {
        let Some(rest) = line.strip_prefix(series).and_then(|r| r.strip_prefix('{')) else {
            continue;
        };
        let (have, value) = rest.split_once("} ").unwrap();
        let have: Vec<&str> = have.split(',').collect();
        if labels
            .iter()
            .all(|(k, v)| have.contains(&format!("{k}=\"{v}\"").as_str()))
        {
            return value.trim().parse().unwrap();
        }
    }
    0.0
}

/// The connections `gw`'s listener `listener` closed for `reason`, once
/// it counted at least `want` (bounded), so that a count short of it
/// fails and one past it shows.
async fn closed(gw: &Running, listener: &str, reason: &str, want: f64) -> f64 {
    let series = "gateway_connections_closed_total";
    let labels = [("listener", listener), ("reason", reason)];
    let started = Instant::now();
    loop {
        let count = scraped(gw, series, &labels).await;
        if count >= want || started.elapsed() > BOUND {
            return count;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Opens a stream of 1,000 tokens (20 s) and reads its first event: a
/// request in flight on a connection of its own.
async fn open(gw: &Running) -> Incoming {
    let mut body = gw.open_stream("m", 1_000).await;
    next_data(&mut body).await;
    body
}

async fn next_data(body: &mut Incoming) -> Bytes {
    loop {
        let frame = tokio::time::timeout(BOUND, body.frame()).await;
        let frame = frame.expect("a frame").expect("not the end").unwrap();
        if let Ok(data) = frame.into_data() {
            return data;
        }
    }
}

/// Whether `stream` is closed (its end, or a reset) within [`BOUND`].
async fn is_closed(stream: &mut TcpStream) -> bool {
    let mut buf = [0; 64];
    let read = tokio::time::timeout(BOUND, stream.read(&mut buf));
    matches!(read.await, Ok(Ok(0)) | Ok(Err(_)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_connection_bound_with_every_connection_busy_a_new_one_reads_a_503_and_is_counted() {
    let gw = fleet("conns-busy", 2, Duration::from_secs(10)).await;
    // Two connections, each with a stream in flight: every slot busy.
    let mut streams = [open(&gw).await, open(&gw).await];
    let mut third = TcpStream::connect(gw.addr).await.unwrap();
    third
        .write_all(b"GET /v2/health/live HTTP/1.1\r\nhost: g\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(BOUND, third.read_to_end(&mut answer));
    read.await
        .expect("answered and closed after the 1 s wait for room")
        .expect("closed with its end, not a reset");
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n").expect("a whole answer");
    let head = head.to_ascii_lowercase();
    assert!(
        head.starts_with("http/1.1 503 service unavailable\r\n"),
        "{answer}"
    );
    for line in [
        "retry-after: 1",
        "connection: close",
        "content-type: application/json",
    ] {
        assert!(head.split("\r\n").any(|l| l == line), "{line}: {answer}");
    }
    let json: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(json["error"]["code"], "gateway_overloaded", "{answer}");
    assert_eq!(
        closed(&gw, "conns-busy", "connection_limit", 1.0).await,
        1.0
    );
    // The busy connections were not closed for it: their streams go on,
    // and they are the two open.
    for stream in &mut streams {
        assert!(!next_data(stream).await.is_empty());
    }
    let open = scraped(
        &gw,
        "gateway_connections_open",
        &[("listener", "conns-busy")],
    );
    assert_eq!(open.await, 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_connection_bound_idle_kept_alive_connections_are_closed_for_room_and_counted() {
    let gw = fleet("conns-idle", 2, Duration::from_secs(10)).await;
    // Two kept-alive connections, each idle after a request, hold every
    // slot: the next client is served at once, idle ones closed for it.
    let mut idle = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(gw.addr).await.unwrap();
        stream
            .write_all(b"GET /v2/health/live HTTP/1.1\r\nhost: g\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0; 256];
        let n = stream.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        idle.push(stream);
    }
    let started = Instant::now();
    assert_eq!(gw.get("/v2/health/live").await.status, 200);
    let waited = started.elapsed();
    // Served by room made, not by the 1 s wait running out.
    assert!(
        waited < Duration::from_millis(900),
        "served after {waited:?}"
    );
    let mut closed_now = 0.0;
    for stream in &mut idle {
        if is_closed(stream).await {
            closed_now += 1.0;
        }
    }
    assert!(closed_now >= 1.0, "no idle connection closed");
    let counted = closed(&gw, "conns-idle", "idle_for_room", closed_now).await;
    assert_eq!(counted, closed_now);
    assert_eq!(
        closed(&gw, "conns-idle", "connection_limit", 0.0).await,
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_a_request_head_is_closed_at_the_header_timeout_and_counted() {
    let timeout = Duration::from_millis(300);
    let gw = fleet("conns-head", 100, timeout).await;
    // Before the connection: hyper's timer starts after it.
    let sent = Instant::now();
    let mut stream = TcpStream::connect(gw.addr).await.unwrap();
    // The request line and a header, never the blank line that ends the
    // head.
    stream
        .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: g\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(BOUND, stream.read_to_end(&mut answer));
    let _ = read.await.expect("closed at the header timeout");
    assert!(
        sent.elapsed() >= timeout,
        "closed after {:?}",
        sent.elapsed()
    );
    // hyper answers nothing (as nginx at its client_header_timeout).
    assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    assert_eq!(closed(&gw, "conns-head", "header_timeout", 1.0).await, 1.0);
}

/// How long a connection accepted at the bound waits for room
/// (`server.rs`'s `ROOM_WAIT`).
const ROOM_WAIT: Duration = Duration::from_secs(1);

/// Connects to `gw` and sends a request head: a connection the gateway
/// must serve or refuse.
async fn connect_and_ask(gw: &Running) -> TcpStream {
    let mut stream = TcpStream::connect(gw.addr).await.unwrap();
    stream
        .write_all(b"GET /v2/health/live HTTP/1.1\r\nhost: g\r\n\r\n")
        .await
        .unwrap();
    stream
}

/// The status line `stream` is answered with, read to its end (bounded);
/// empty when it was closed without an answer.
async fn status_line(mut stream: TcpStream) -> String {
    let mut answer = Vec::new();
    let read = tokio::time::timeout(BOUND, stream.read_to_end(&mut answer));
    let _ = read.await.expect("answered or closed");
    let answer = String::from_utf8_lossy(&answer);
    answer.lines().next().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_connection_bound_a_burst_of_new_connections_is_refused_together_not_one_a_second() {
    let gw = fleet("conns-burst", 2, Duration::from_secs(10)).await;
    let mut streams = [open(&gw).await, open(&gw).await];
    // Eight at once, every slot busy: each waits for room in a task of
    // its own, so all are refused after one wait, not one a wait each.
    let started = Instant::now();
    let mut asked = Vec::new();
    for _ in 0..8 {
        asked.push(tokio::spawn(status_line(connect_and_ask(&gw).await)));
    }
    for answer in asked {
        let line = answer.await.unwrap();
        assert_eq!(line, "HTTP/1.1 503 Service Unavailable");
    }
    let took = started.elapsed();
    println!("8 connections refused at the bound in {took:?}");
    assert!(
        took < 2 * ROOM_WAIT,
        "8 refusals took {took:?}: one per wait for room"
    );
    assert_eq!(
        closed(&gw, "conns-burst", "connection_limit", 8.0).await,
        8.0
    );
    for stream in &mut streams {
        assert!(!next_data(stream).await.is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_waiting_for_room_when_the_drain_begins_are_refused_at_once() {
    let mut gw = fleet("conns-wait-drain", 2, Duration::from_secs(10)).await;
    let _streams = [open(&gw).await, open(&gw).await];
    let mut waiting = Vec::new();
    for _ in 0..4 {
        waiting.push(connect_and_ask(&gw).await);
    }
    // All four accepted and waiting for room (each for 1 s at most).
    let labels = [("listener", "conns-wait-drain")];
    let series = "gateway_connections_waiting";
    let polled = Instant::now();
    while scraped(&gw, series, &labels).await < 4.0 {
        assert!(polled.elapsed() < ROOM_WAIT, "never 4 waiting");
        tokio::task::yield_now().await;
    }
    gw.shut_down();
    let drained = Instant::now();
    // The drain does not wait for them: each is answered 503 at once, and
    // the listener closes meanwhile.
    for stream in waiting {
        assert_eq!(
            status_line(stream).await,
            "HTTP/1.1 503 Service Unavailable"
        );
    }
    while TcpStream::connect(gw.addr).await.is_ok() {
        assert!(drained.elapsed() < BOUND, "the listener still accepts");
        tokio::task::yield_now().await;
    }
    let took = drained.elapsed();
    println!("4 waiting connections refused {took:?} after the drain began");
    assert!(
        took < ROOM_WAIT / 2,
        "refused {took:?} after the drain began"
    );
    assert_eq!(
        closed(&gw, "conns-wait-drain", "connection_limit", 4.0).await,
        4.0
    );
    assert_eq!(scraped(&gw, series, &labels).await, 0.0);
}
