//! The etcd tests' own tools, checked against the real thing: the etcd of
//! `support/etcd.rs` keeps its keys and revision across a crash and a
//! restart on the same ports.
//!
//! Keys go through etcd's JSON gateway (`POST /v3/kv/...`, keys and values
//! in base64) over plain sockets, so these checks lean on neither the
//! library nor an etcd client crate.

#[path = "support/etcd.rs"]
mod etcd;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use etcd::EtcdServer;

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
