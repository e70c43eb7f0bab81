//! The etcd tests' own tools, checked against the real thing: the etcd of
//! `etcd.rs` (`crates/test-support`) keeps its keys and revision across a
//! crash and a restart on the same ports, and `tcp_cut.rs` cuts live
//! connections and turns new ones away while paused.
//!
//! Keys go through etcd's JSON gateway (`POST /v3/kv/...`, keys and values
//! in base64) over plain sockets, so these checks lean on neither the
//! library nor an etcd client crate.

use crate::etcd;
use crate::tcp_cut;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use etcd::EtcdServer;
use tcp_cut::CutProxy;

/// Standard base64 of `bytes`, with padding.
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().fold(0u32, |n, &b| n << 8 | u32::from(b)) << (8 * (3 - chunk.len()));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// One request on `stream`, kept open; the answer's body.
fn post_on(stream: &mut TcpStream, path: &str, body: &str) -> std::io::Result<String> {
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer);
        let Some(end) = text.find("\r\n\r\n") else {
            continue;
        };
        let length: usize = text[..end]
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse().unwrap())
            })
            .expect("a content length");
        if answer.len() >= end + 4 + length {
            return Ok(text[end + 4..end + 4 + length].to_owned());
        }
    }
}

/// Whether `result` says the peer closed or reset the connection — not
/// that the read timed out waiting.
fn closed<T>(result: &std::io::Result<T>) -> bool {
    match result {
        Ok(_) => false,
        Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
    }
}

fn post(addr: SocketAddr, path: &str, body: &str) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    post_on(&mut stream, path, body).expect("an answer")
}

fn put(addr: SocketAddr, key: &str, value: &str) -> String {
    let body = format!(
        r#"{{"key":"{}","value":"{}"}}"#,
        base64(key.as_bytes()),
        base64(value.as_bytes())
    );
    post(addr, "/v3/kv/put", &body)
}

fn range(addr: SocketAddr, key: &str) -> String {
    post(
        addr,
        "/v3/kv/range",
        &format!(r#"{{"key":"{}"}}"#, base64(key.as_bytes())),
    )
}

#[test]
fn etcd_keeps_its_keys_and_revision_across_a_crash() {
    let Some(mut etcd) = EtcdServer::start() else {
        return;
    };
    assert!(etcd.client_url().starts_with("http://127.0.0.1:"));
    let addr = etcd.client_addr();
    let first = put(addr, "/t/a", "one");
    assert!(first.contains(r#""revision":"2""#), "{first}");
    put(addr, "/t/a", "two");
    etcd.kill();
    assert!(
        TcpStream::connect(addr).is_err(),
        "etcd still answers after kill"
    );
    etcd.restart();
    let got = range(addr, "/t/a");
    assert!(
        got.contains(&base64(b"two")),
        "the key's last value is kept: {got}"
    );
    assert!(
        got.contains(r#""revision":"3""#),
        "the revision is kept: {got}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_cuts_live_connections_and_turns_new_ones_away_while_paused() {
    let Some(etcd) = tokio::task::spawn_blocking(EtcdServer::start)
        .await
        .unwrap()
    else {
        return;
    };
    let proxy = CutProxy::start(etcd.client_addr());
    // The sockets below block: off the runtime's threads, which forward.
    tokio::task::spawn_blocking(move || {
        let through: SocketAddr = proxy.url().trim_start_matches("http://").parse().unwrap();
        let mut live = TcpStream::connect(through).unwrap();
        live.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let answer = post_on(&mut live, "/v3/kv/put", r#"{"key":"YQ==","value":"Yg=="}"#);
        assert!(answer.unwrap().contains("revision"), "the proxy forwards");
        assert_eq!((proxy.accepted(), proxy.open()), (1, 1));

        proxy.cut();
        let mut buf = [0u8; 1];
        let after = live.read(&mut buf);
        assert!(
            matches!(after, Ok(0)) || closed(&after),
            "a cut connection is closed: {after:?}"
        );
        assert_eq!(proxy.cuts(), 1);
        // A new connection goes through again.
        assert!(range(through, "a").contains(&base64(b"b")));
        assert_eq!(proxy.accepted(), 2);

        proxy.pause();
        let mut turned = TcpStream::connect(through).unwrap();
        turned
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let refused = post_on(&mut turned, "/v3/kv/range", r#"{"key":"YQ=="}"#);
        assert!(
            closed(&refused),
            "a connection while paused is turned away: {refused:?}"
        );
        assert_eq!((proxy.accepted(), proxy.refused()), (2, 1));
        proxy.resume();
        assert!(range(through, "a").contains(&base64(b"b")));
        assert_eq!(proxy.accepted(), 3);
        drop(etcd);
    })
    .await
    .unwrap();
}
