//! A real etcd on 127.0.0.1 for the etcd discovery tests: Debian's
//! `etcd-server` (`/usr/bin/etcd`, or `etcd` on `PATH`) as a child process
//! with a temporary data directory of its own (see `scratch`).
//!
//! `.ci/run` installs it. Where it is missing, [`EtcdServer::start`] returns
//! `None` with a message and the test is skipped — except under `CI`, where
//! a missing etcd is a failure (as for the real model servers in
//! `mlserver.rs`): CI must not pass by skipping the store.
//!
//! The gateway's tests use it too (`crates/gateway/tests/gateway/main.rs`
//! names this file).
//!
//! The calls block (they start, kill and wait for a process); from async
//! code, call them on a multi-thread runtime or in `spawn_blocking`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::ports::free_ports;

/// How long etcd may take to answer its first health check.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// How many times a start that lost a port to another process is retried
/// on new ports.
const PORT_TRIES: usize = 5;

/// One etcd member, alone in its cluster, on two ports of 127.0.0.1.
#[derive(Debug)]
pub struct EtcdServer {
    program: PathBuf,
    /// Removed on drop: the data directory and the log are inside.
    dir: PathBuf,
    client: u16,
    peer: u16,
    /// Where `/health` is served over plain http when the client port
    /// speaks TLS (0: on the client port).
    metrics: u16,
    tls: Option<EtcdTls>,
    child: Option<Child>,
}

/// TLS on etcd's client port: its certificate and key (PEM files), and a
/// CA whose certificates clients must present (`--client-cert-auth`).
#[derive(Debug, Clone)]
pub struct EtcdTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

/// The etcd executable, or `None` (with a message) when it is not installed
/// outside CI. Under `CI` a missing etcd panics.
pub fn installed() -> Option<PathBuf> {
    let debian = PathBuf::from("/usr/bin/etcd");
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join("etcd"));
    if let Some(program) = std::iter::once(debian).chain(on_path).find(|p| p.is_file()) {
        return Some(program);
    }
    let message = "etcd is not installed (`bash .ci/run` installs Debian's etcd-server)";
    if std::env::var_os("CI").is_some() {
        panic!("{message}: under CI the etcd tests must run");
    }
    // Written past libtest's capture (which takes `eprintln!`'s output
    // only), so that the skip shows in the test output under the test's
    // name (libtest names each test's thread after it).
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!("SKIPPED {test}: {message}\n").as_bytes(),
    );
    None
}

/// A folder of its own in memory (`/dev/shm`) where there is such a
/// tmpfs, else under the system's temporary folder. etcd syncs its log to
/// disk on every write: on a disk busy with builds one sync was seen to
/// outlast etcd's request timeout (a put failed with "request timed
/// out"); on a tmpfs a sync costs nothing, and the data still outlives a
/// kill, which is all a restart needs.
fn scratch() -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        "tmb-etcd-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let shm = Path::new("/dev/shm").join(&name);
    for dir in [shm, std::env::temp_dir().join(&name)] {
        let _ = std::fs::remove_dir_all(&dir);
        if std::fs::create_dir_all(&dir).is_ok() {
            return dir;
        }
    }
    panic!("no scratch folder for etcd in /dev/shm or the temporary folder");
}

/// Whether etcd's `GET /health` on `port` says it is healthy (it answers so
/// once it has a leader and serves a read). One try, a refused connection
/// fails at once; a hung one within a second.
fn healthy(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let request = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200") && answer.contains(r#""health":"true""#)
}

impl EtcdServer {
    /// Starts etcd on two free ports with an empty data directory and waits
    /// until it is healthy; `None` when etcd is not installed (outside CI).
    /// A start that lost a port between its choice and etcd's bind is
    /// retried on new ports.
    pub fn start() -> Option<Self> {
        Self::start_with(None)
    }

    /// As [`start`](Self::start), its client port over TLS
    /// (`https://`), `/health` on a plain metrics port.
    pub fn start_tls(tls: EtcdTls) -> Option<Self> {
        Self::start_with(Some(tls))
    }

    fn start_with(tls: Option<EtcdTls>) -> Option<Self> {
        let program = installed()?;
        let mut server = Self {
            program,
            dir: scratch(),
            client: 0,
            peer: 0,
            metrics: 0,
            tls,
            child: None,
        };
        for attempt in 1..=PORT_TRIES {
            // 10000..20000: apart from the model servers' 20000..32000.
            [server.client, server.peer, server.metrics] = free_ports(10_000, 10_000);
            server.spawn();
            match server.wait_ready() {
                Ok(()) => return Some(server),
                Err(log) if log.contains("address already in use") && attempt < PORT_TRIES => {
                    // A fresh member on the new ports: start from empty.
                    let _ = std::fs::remove_dir_all(server.data_dir());
                }
                Err(log) => panic!("etcd exited before it was ready:\n{log}"),
            }
        }
        unreachable!("the last try panics")
    }

    /// `http://127.0.0.1:PORT` (`https://` with TLS), where clients
    /// reach it.
    pub fn client_url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client)
    }

    /// The client port's address.
    pub fn client_addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.client))
    }

    /// Kills the process (SIGKILL) and reaps it: as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills it if it runs, starts it again on the same ports with the same
    /// data directory (so with every key and revision it had), and waits
    /// until it is healthy.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
        if let Err(log) = self.wait_ready() {
            panic!("etcd exited before it was ready again:\n{log}");
        }
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("etcd.log")
    }

    fn spawn(&mut self) {
        let client = self.client_url();
        let peer = format!("http://127.0.0.1:{}", self.peer);
        let name = "tmb";
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("etcd's log file");
        let err = log.try_clone().expect("etcd's log file");
        let data: &Path = &self.data_dir();
        let mut command = Command::new(&self.program);
        if let Some(tls) = &self.tls {
            let metrics = format!("http://127.0.0.1:{}", self.metrics);
            command.args(["--listen-metrics-urls", &metrics]);
            command.arg("--cert-file").arg(&tls.cert);
            command.arg("--key-file").arg(&tls.key);
            if let Some(ca) = &tls.client_ca {
                command.arg("--trusted-ca-file").arg(ca);
                command.arg("--client-cert-auth");
            }
        }
        let child = command
            .args(["--name", name])
            .arg("--data-dir")
            .arg(data)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("{name}={peer}")])
            .args(["--initial-cluster-state", "new"])
            // Warnings and errors only ("address already in use" is one).
            .args(["--logger", "zap", "--log-outputs", "stderr"])
            .args(["--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.program.display()));
        self.child = Some(child);
    }

    /// Waits until `/health` answers healthy: tries 20 ms apart, within
    /// [`READY_WITHIN`]; a process that exited first is an `Err` with its
    /// log's tail.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_WITHIN;
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("{status}: {}", self.log_tail()));
                }
            }
            let health = if self.tls.is_some() {
                self.metrics
            } else {
                self.client
            };
            if healthy(health) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!(
            "etcd not healthy within {READY_WITHIN:?}:\n{}",
            self.log_tail()
        );
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("etcd's log, to the end:\n{}", self.log_tail());
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
