//! The `sims` binary as a user starts it: its servers printed as
//! `NAME=URL` lines on standard output, serving (or answering 503 with
//! `--down`) until SIGTERM, after which it exits 0; a bad flag exits 2.

use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// A bound so that a broken binary fails the test instead of hanging it.
const BOUND: Duration = Duration::from_secs(20);

/// `sims` started with `args`, and the `NAME=URL` lines it printed.
async fn start(args: &[&str], servers: usize) -> (Child, Vec<(String, String)>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sims"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    while printed.len() < servers {
        let line = tokio::time::timeout(BOUND, lines.next_line()).await;
        let line = line.expect("its servers within the bound").unwrap();
        let line = line.expect("a line for each server");
        let (name, url) = line.split_once('=').expect("NAME=URL");
        printed.push((name.to_owned(), url.to_owned()));
    }
    (child, printed)
}

/// The status of `GET url/v2/health/ready`.
async fn ready(url: &str) -> u16 {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let req = http::Request::get(format!("{url}/v2/health/ready"))
        .body(Empty::new())
        .unwrap();
    let rsp = tokio::time::timeout(BOUND, client.request(req)).await;
    rsp.unwrap().unwrap().status().as_u16()
}

/// Sends SIGTERM to `child` and returns its exit status.
async fn terminate(mut child: Child) -> std::process::ExitStatus {
    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    tokio::time::timeout(BOUND, child.wait())
        .await
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn prints_each_server_serves_until_sigterm_and_exits_0() {
    let (child, printed) = start(&["--count", "2"], 2).await;
    let names: Vec<&str> = printed.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["sim-0", "sim-1"]);
    for (_, url) in &printed {
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        assert_eq!(ready(url).await, 200);
    }
    assert!(terminate(child).await.success());
}

#[tokio::test]
async fn down_servers_answer_503() {
    let (child, printed) = start(&["--count", "1", "--down"], 1).await;
    assert_eq!(ready(&printed[0].1).await, 503);
    assert!(terminate(child).await.success());
}

#[tokio::test]
async fn a_count_other_than_the_ports_is_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_sims"))
        .args(["--count", "2", "--port", "1"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("one port for each server"), "{stderr}");
}
