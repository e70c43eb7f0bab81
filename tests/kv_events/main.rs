//! The KV-cache event subscriber against vLLM's own publisher
//! (`vllm.distributed.kv_events.ZmqEventPublisher`, no model), driven by
//! `publisher.py` beside this file: stored blocks match, a chain stored
//! in two events matches, removals unmatch, a clear and a restart clear,
//! blocks published before the subscriber joined and a batch lost on the
//! way come back by replay, a subscriber started before vLLM connects once
//! it binds.
//!
//! Needs vLLM in `target/venv-vllm` (`bash scripts/vllm-venv`): skipped
//! with the reason when it is not there, except under `CI`, where that
//! fails. One publisher process (importing vLLM takes seconds), the steps
//! in order; each waits for the index by a bounded poll, never a sleep.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use tower_model_balance::backend::BackendId;
use tower_model_balance::kv::{subscribe, KvEndpoint, KvIndex, PromptBlocks};
use tower_model_balance_test_support::ports::free_ports;

/// vLLM's block size on CPUs.
const BS: u32 = 128;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The venv's Python, or why there is none.
fn installed() -> Result<PathBuf, String> {
    let venv = root().join("target").join("venv-vllm");
    let python = venv.join("bin").join("python");
    match (python.exists(), venv.join(".installed").exists()) {
        (true, true) => Ok(python),
        _ => Err(format!(
            "vLLM is not installed at {} (`bash scripts/vllm-venv` installs it)",
            venv.display()
        )),
    }
}

/// `publisher.py`, killed when dropped.
struct Publisher {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Publisher {
    fn start(python: &PathBuf, port: u16, replay: u16) -> Self {
        let script = root().join("tests").join("kv_events").join("publisher.py");
        let mut child = Command::new(python)
            .arg(script)
            .arg(port.to_string())
            .arg(replay.to_string())
            .env("HF_HUB_OFFLINE", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start publisher.py");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut publisher = Self {
            child,
            stdin,
            stdout,
        };
        publisher.expect("ready");
        publisher
    }

    fn expect(&mut self, want: &str) {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("read publisher.py");
        assert_eq!(line.trim(), want, "publisher.py said {line:?}");
    }

    /// Sends `command` and waits for its batch to be published.
    fn run(&mut self, command: serde_json::Value) {
        writeln!(self.stdin, "{command}").expect("write publisher.py");
        self.stdin.flush().expect("flush publisher.py");
        self.expect("ok");
    }

    fn store(&mut self, hashes: &[u64], parent: Option<u64>, tokens: &[u32]) {
        self.run(serde_json::json!({
            "cmd": "store", "hashes": hashes, "parent": parent,
            "tokens": tokens, "block_size": BS,
        }));
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "{}", serde_json::json!({"cmd": "exit"}));
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `blocks` full blocks of tokens from `first` on.
fn tokens(first: u32, blocks: u32) -> Vec<u32> {
    (first..first + blocks * BS).collect()
}

/// Polls until `done` holds, for at most 10 s.
async fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "not within 10 s: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_index_follows_vllm_s_own_publisher() {
    let python = match installed() {
        Ok(python) => python,
        Err(reason) if std::env::var_os("CI").is_some() => {
            panic!("{reason}: under CI the real-vLLM tests must run")
        }
        Err(reason) => {
            eprintln!("skipped: {reason}");
            return;
        }
    };
    let [port, replay] = free_ports::<2>(15_000, 3_000);
    let endpoint = KvEndpoint::new(&format!("tcp://127.0.0.1:{port}"))
        .unwrap()
        .with_replay(&format!("tcp://127.0.0.1:{replay}"))
        .unwrap();
    let index = KvIndex::default();
    // A router up before its server: this one connects once vLLM binds.
    let first = BackendId::new("vllm-first").unwrap();
    let _first = subscribe(index.clone(), first.clone(), endpoint.clone()).unwrap();
    let mut vllm = Publisher::start(&python, port, replay);
    let id = BackendId::new("vllm-0").unwrap();
    let matched = |tokens: &[u32]| index.matched(&id, &PromptBlocks::new(tokens, BS));

    // Published before the subscriber joined: recovered by the replay
    // from 0 it asks for on connecting.
    let early = tokens(0, 2);
    vllm.store(&[101, 102], None, &early);
    let _task = subscribe(index.clone(), id.clone(), endpoint).unwrap();
    eventually("the early blocks replayed", || matched(&early) == 2).await;
    assert_eq!(index.block_size(), Some(BS));
    let early_blocks = PromptBlocks::new(&early, BS);
    eventually("the subscriber that waited for vLLM has them", || {
        index.matched(&first, &early_blocks) == 2
    })
    .await;

    // A chain stored in two events, the second naming the first's block
    // as its parent (as bytes, vLLM's SHA-256 form).
    let chain = tokens(1_000, 3);
    vllm.run(serde_json::json!({
        "cmd": "store", "hashes": [201, 202], "parent": null, "bytes": true,
        "tokens": &chain[..2 * BS as usize], "block_size": BS,
    }));
    vllm.run(serde_json::json!({
        "cmd": "store", "hashes": [203], "parent": 202, "bytes": true,
        "tokens": &chain[2 * BS as usize..], "block_size": BS,
    }));
    eventually("the chain stored in two events", || matched(&chain) == 3).await;

    // Removal unmatches from the removed block on.
    vllm.run(serde_json::json!({"cmd": "remove", "hashes": [101]}));
    eventually("the removed block unmatched", || matched(&early) == 0).await;

    // A batch lost on the way (kept for replay, not sent live): the next
    // live batch shows the gap, and the replay repairs it.
    let lost = tokens(2_000, 1);
    vllm.run(serde_json::json!({
        "cmd": "store", "hashes": [301], "parent": null, "drop": true,
        "tokens": &lost, "block_size": BS,
    }));
    let after = tokens(3_000, 1);
    vllm.store(&[302], None, &after);
    eventually("the lost batch replayed", || {
        matched(&lost) == 1 && matched(&after) == 1
    })
    .await;
    assert_eq!(matched(&chain), 3);

    // The server's own clear.
    vllm.run(serde_json::json!({"cmd": "clear"}));
    eventually("cleared", || index.blocks(&id) == 0).await;

    // A restart: a new publisher on the same ports, numbering from 0. The
    // old server's blocks are gone; the new one's are learnt.
    let before = tokens(4_000, 1);
    vllm.store(&[401], None, &before);
    eventually("stored before the restart", || matched(&before) == 1).await;
    vllm.run(serde_json::json!({"cmd": "restart"}));
    let fresh = tokens(5_000, 2);
    vllm.store(&[501, 502], None, &fresh);
    eventually("the new server's blocks, the old one's gone", || {
        matched(&before) == 0 && matched(&fresh) == 2
    })
    .await;
}
