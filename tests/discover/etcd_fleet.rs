//! The replicas of the etcd agreement test, seen from the parent: child
//! processes (this test binary again, see `etcd_replica.rs`), each line
//! they print read by a thread and stamped with the time it arrived. The
//! parent waits on those lines, with deadlines — never on a sleep.

use std::io::BufRead;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::etcd_replica::{Line, PREFIX, REPLICA, URL};

/// The longest the parent waits for the replicas to agree before it
/// fails (the test's bound is tighter: each wait is measured).
const AGREE_WITHIN: Duration = Duration::from_secs(10);

enum Message {
    Line(usize, Instant, Line),
    Gone(usize),
}

/// How one wait for agreement went.
#[derive(Debug, Clone, Copy)]
pub struct Settled {
    /// From the change until the last of the replicas waited on printed
    /// the expected digest.
    pub took: Duration,
    /// The most digests one replica went through after the change before
    /// the expected one: staged steps (and, in a burst, earlier states).
    pub steps: usize,
}

/// The replica processes and the last line each printed.
pub struct Replicas {
    names: Vec<String>,
    children: Vec<Child>,
    stdins: Vec<Option<ChildStdin>>,
    lines: mpsc::UnboundedReceiver<Message>,
    /// Each replica's last line, and when its digest last changed.
    pub last: Vec<Line>,
    since: Vec<Instant>,
    /// Every line of every replica, in arrival order.
    pub history: Vec<Vec<Line>>,
}

impl Replicas {
    /// Starts a replica per URL, running `test` of this binary with the
    /// replica's environment set.
    pub fn spawn(test: &str, urls: &[String], prefix: &str) -> Self {
        let exe = std::env::current_exe().expect("the test binary");
        let (tx, lines) = mpsc::unbounded_channel();
        let mut replicas = Self {
            names: Vec::new(),
            children: Vec::new(),
            stdins: Vec::new(),
            lines,
            last: vec![Line::default(); urls.len()],
            since: vec![Instant::now(); urls.len()],
            history: vec![Vec::new(); urls.len()],
        };
        for (i, url) in urls.iter().enumerate() {
            let name = format!("replica-{i}");
            let mut child = Command::new(&exe)
                // The test's name alone selects it, in whatever module of
                // the binary it sits: no other test's name holds it.
                .args([test, "--nocapture", "--test-threads=1"])
                .env(REPLICA, &name)
                .env(URL, url)
                .env(PREFIX, prefix)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("the test binary runs again");
            let stdout = child.stdout.take().unwrap();
            replicas.stdins.push(child.stdin.take());
            replicas.children.push(child);
            replicas.names.push(name);
            let tx = tx.clone();
            std::thread::spawn(move || {
                for text in std::io::BufReader::new(stdout).lines() {
                    let Ok(text) = text else { break };
                    // The first follows the harness's `test NAME ... `.
                    if let Some(at) = text.find("digest=") {
                        let line: Line = text[at..].parse().expect("a replica's line");
                        let _ = tx.send(Message::Line(i, Instant::now(), line));
                    }
                }
                let _ = tx.send(Message::Gone(i));
            });
        }
        replicas
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Takes the next line (or fails at `deadline`, or when a replica
    /// exits), recording it; returns the replica it came from.
    async fn next(&mut self, deadline: Instant, waiting_for: &str) -> usize {
        match tokio::time::timeout_at(deadline, self.lines.recv()).await {
            Ok(Some(Message::Line(i, at, line))) => {
                if line.digest != self.last[i].digest {
                    self.since[i] = at;
                }
                self.last[i] = line;
                self.history[i].push(line);
                i
            }
            Ok(Some(Message::Gone(i))) => panic!("{} exited", self.names[i]),
            Ok(None) => unreachable!("the readers hold a sender each"),
            Err(_) => panic!(
                "{waiting_for}: not within {AGREE_WITHIN:?}; {}",
                self.state()
            ),
        }
    }

    /// Waits until `done` holds of the replicas' last lines.
    pub async fn until(&mut self, waiting_for: &str, done: impl Fn(&[Line]) -> bool) {
        let deadline = Instant::now() + AGREE_WITHIN;
        while !done(&self.last) {
            self.next(deadline, waiting_for).await;
        }
    }

    /// Waits until every replica of `which` has printed `expected` after
    /// `change`, and measures how long after `from` the last of them did.
    pub async fn settle(
        &mut self,
        change: &str,
        expected: u64,
        from: Instant,
        which: &[usize],
    ) -> Settled {
        let deadline = from + AGREE_WITHIN;
        let mut steps = vec![0; self.len()];
        let mut digests: Vec<u64> = self.last.iter().map(|l| l.digest).collect();
        while !which.iter().all(|&i| self.last[i].digest == expected) {
            let i = self
                .next(deadline, &format!("agreement after {change}"))
                .await;
            if self.last[i].digest != digests[i] && self.last[i].digest != expected {
                steps[i] += 1;
            }
            digests[i] = self.last[i].digest;
        }
        let took = which
            .iter()
            .map(|&i| self.since[i].saturating_duration_since(from))
            .max()
            .unwrap_or_default();
        let steps = which.iter().map(|&i| steps[i]).max().unwrap_or(0);
        Settled { took, steps }
    }

    /// Each replica's last line, for failure messages.
    pub fn state(&self) -> String {
        let lines: Vec<String> = (0..self.len())
            .map(|i| format!("{}: {}", self.names[i], self.last[i]))
            .collect();
        lines.join("; ")
    }

    /// Closes every replica's stdin and waits for each to exit, which
    /// must be a success.
    pub fn close(&mut self) {
        self.stdins.clear();
        for (child, name) in self.children.iter_mut().zip(&self.names) {
            let status = child.wait().expect("wait for a replica");
            assert!(status.success(), "{name} failed: {status}");
        }
        self.children.clear();
    }
}

impl Drop for Replicas {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
