//! The `gateway` binary in front of the two vLLM servers, stopped as a
//! rollout stops it: SIGTERM with streams in flight. Every stream
//! completes with `[DONE]`, readiness answers 503 and a new connection
//! is refused during the drain, and the process exits 0.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::Instant;

use crate::fixture::Vllm;
use crate::gateway::{chat, get, open_stream};
use crate::text::text;

/// Tokens each stream asks for: several seconds of generation on the CPU
/// build, so that all are in flight at the signal.
const TOKENS: u32 = 600;

/// The `gateway` binary beside this test's (`cargo test --workspace`
/// builds it with the gateway crate's tests).
fn gateway_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>");
    let binary = dir.join("gateway");
    assert!(
        binary.exists(),
        "{} is missing: `cargo test --workspace` (or `cargo build -p tower-model-balance-gateway`) builds it",
        binary.display()
    );
    binary
}

pub async fn sigterm_drains_every_stream(servers: &[Vllm]) {
    let mut command = tokio::process::Command::new(gateway_binary());
    for s in servers {
        command.args([
            "--backend",
            &format!("{}=http://127.0.0.1:{}", s.name, s.port),
        ]);
    }
    let mut child = command
        .args(["--probe", "openai", "--no-placement"])
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .args(["--drain-timeout", "300", "--first-token-timeout", "120"])
        .args(["--idle-timeout", "120"])
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the gateway starts");
    // Its messages, addresses among them, on standard error.
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let (mut url, mut admin) = (None, None);
    while url.is_none() || admin.is_none() {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line());
        let line = line.await.expect("its addresses within 30 s").unwrap();
        let line = line.expect("the gateway prints its addresses");
        let found = |prefix: &str| {
            let rest = line.strip_prefix(prefix)?;
            let addr = rest.split_whitespace().next()?.trim_end_matches(':');
            Some(format!("http://{addr}"))
        };
        url = url.or_else(|| found("gateway on http://"));
        admin = admin.or_else(|| found("admin on http://"));
    }
    let (url, admin) = (url.unwrap(), admin.unwrap());
    // Read on, so that its messages never fill the pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    // Both servers listed by the probes before the streams.
    let started = Instant::now();
    while !get(&format!("{url}/v1/models"))
        .await
        .1
        .contains(crate::fixture::MODEL)
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no models listed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let chat_url = format!("{url}/v1/chat/completions");
    let mut streams = Vec::new();
    for i in 0..4 {
        streams.push(open_stream(&chat_url, &chat(&text(1_300 + i, 5), TOKENS, true)).await);
    }
    let pid = child.id().expect("running").to_string();
    let signalled = Instant::now();
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status();
    assert!(kill.expect("kill runs").success());
    // Readiness 503 (once the signal is delivered: within 5 s) and new
    // connections refused, while the streams run.
    while get(&format!("{admin}/ready")).await.0 != 503 {
        assert!(
            signalled.elapsed() < Duration::from_secs(5),
            "readiness still 200"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let fresh = reqwest::Client::new();
    let started = Instant::now();
    while fresh.get(format!("{url}/v1/models")).send().await.is_ok() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "still accepting"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut finished = Vec::new();
    for stream in streams {
        let text = stream.finish().await.expect("no transport error");
        let chunks = text.matches("chat.completion.chunk").count();
        assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
        assert!(!text.contains(r#"{"error""#), "{text}");
        // Generated to its `max_tokens` (`ignore_eos`): whole.
        assert!(text.contains(r#""finish_reason":"length""#), "{text}");
        finished.push(chunks);
    }
    let status = tokio::time::timeout(Duration::from_secs(300), child.wait())
        .await
        .expect("exits within the drain")
        .unwrap();
    println!(
        "  4 streams of {TOKENS} tokens in flight at SIGTERM: chunks {finished:?}, each to its length and [DONE]; {status} {:.1} s after the signal",
        signalled.elapsed().as_secs_f64()
    );
    assert!(status.success(), "{status}");
}
