//! The routers compared, each started as a subprocess on a free port in
//! front of a fresh fleet, ready once its health route answers 200.
//!
//! Every router started is held in [`LIVE`] until it is stopped, so that
//! [`stop_all`] can kill and reap whatever is still running when the
//! comparison ends early (an error, SIGINT, SIGTERM): no router outlives
//! the program.

use std::fmt;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use tower_model_balance_sim::ServerConfig;

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::load::Workload;

/// The longest a router may take to answer its health route (vLLM
/// Router's Python launcher takes a few seconds to import).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the health route is asked while the router starts.
const POLL_EVERY: Duration = Duration::from_millis(20);

/// vLLM Router's policies that apply to a plain fleet (no KV events, no
/// prefill/decode split), in the order they are run.
pub const VLLM_POLICIES: [&str; 5] = [
    "cache_aware",
    "power_of_two",
    "round_robin",
    "consistent_hash",
    "random",
];

/// Who sends the requests to the servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// No router: each request straight to a server its model is placed
    /// on (the baseline of the added latency).
    Direct,
    /// The bare proxy (`crates/gateway`'s `bare-proxy`): round robin with
    /// the gateway's runtime and client, no layers: the hop's own cost.
    Bare,
    /// The bare proxy, each request steered to where the direct row's
    /// oracle sends it: the hop's own cost with the servers doing the
    /// oracle's work (warm, short answers), the floor for the gateway's
    /// CPU.
    BareOracle,
    /// The gateway (`crates/gateway`), this crate's stack.
    Gateway,
    /// vLLM Router with the policy named.
    Vllm(String),
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Direct => f.write_str("direct"),
            Kind::Bare => f.write_str("bare"),
            Kind::BareOracle => f.write_str("bare oracle"),
            Kind::Gateway => f.write_str("gateway"),
            Kind::Vllm(policy) => write!(f, "vllm-router {policy}"),
        }
    }
}

/// Where the routers' programs are, and where their output goes.
#[derive(Debug, Clone)]
pub struct Programs {
    pub gateway: PathBuf,
    pub bare_proxy: PathBuf,
    pub vllm_router: PathBuf,
    pub logs: PathBuf,
}

/// The routers started and not yet stopped, with their PIDs.
static LIVE: Mutex<Vec<(u32, Child)>> = Mutex::new(Vec::new());

fn live() -> MutexGuard<'static, Vec<(u32, Child)>> {
    LIVE.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Kills `child` and waits for it to exit (reaped: no zombie left).
async fn kill(mut child: Child) {
    let _ = child.start_kill();
    let _ = child.wait().await;
}

/// Kills the router `pid`, if it is still held, and reaps it.
async fn stop_pid(pid: u32) {
    let child = {
        let mut live = live();
        let at = live.iter().position(|(p, _)| *p == pid);
        at.map(|at| live.swap_remove(at).1)
    };
    if let Some(child) = child {
        kill(child).await;
    }
}

/// Kills and reaps every router still running.
pub async fn stop_all() {
    let children = std::mem::take(&mut *live());
    for (_, child) in children {
        kill(child).await;
    }
}

/// A router running, held in [`LIVE`] until [`Running::stop`] (or
/// [`stop_all`]).
#[derive(Debug)]
pub struct Running {
    pub addr: SocketAddr,
    pub pid: u32,
}

/// A port free on 127.0.0.1 now (the kernel's pick, released for the
/// router to bind).
fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Starts `kind` (not [`Kind::Direct`]) in front of `servers` and waits
/// until its health route answers 200; its output goes to a log file of
/// its own under `programs.logs`, named by `label`.
pub async fn start(
    kind: &Kind,
    servers: &[SocketAddr],
    programs: &Programs,
    workload: Workload,
    label: &str,
) -> Result<Running, String> {
    let port = free_port().map_err(|e| format!("no free port: {e}"))?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let urls = servers.iter().map(|s| format!("http://{s}"));
    let (program, health, mut command) = match kind {
        Kind::Direct => return Err("the direct row has no router".into()),
        Kind::Bare | Kind::BareOracle => {
            let mut command = Command::new(&programs.bare_proxy);
            command.args(["--listen", &addr.to_string()]);
            for url in urls {
                command.args(["--backend", &url]);
            }
            // It forwards every path: ready once a server answers through it.
            (&programs.bare_proxy, "/health", command)
        }
        Kind::Gateway => {
            let mut command = Command::new(&programs.gateway);
            command.args(["--listen", &addr.to_string()]);
            // Its admin listener (`/metrics`) on a port of the system's
            // choosing: the default 8081 may be taken.
            command.args(["--admin-listen", "127.0.0.1:0"]);
            // Named as the servers name themselves (`run.rs`): every
            // run hashes the models onto the same ring, wherever the
            // servers' ports fell.
            for (i, url) in urls.enumerate() {
                command.args(["--backend", &format!("sim-{i}={url}")]);
            }
            // vLLM-like servers: their model list is `/v1/models`, and they
            // load a model when a request names it.
            command.args(["--probe", "openai", "--no-placement"]);
            if workload == Workload::Plain {
                // What each server holds at once, as the oracle of the
                // direct row knows it: the simulated servers' default.
                let slots = ServerConfig::default().resident_slots().to_string();
                command.args(["--model-slots", &slots]);
            }
            if workload == Workload::Prefix {
                // Prefix affinity: a prompt's first bytes pick its owners,
                // a session's turns go back where the last one went.
                let bytes = crate::prefix::PREFIX_BYTES.to_string();
                command.args(["--prefix-bytes", &bytes]);
                command.args(["--session-header", crate::prefix::SESSION_HEADER]);
            }
            (&programs.gateway, "/v2/health/ready", command)
        }
        Kind::Vllm(policy) => {
            let prometheus = free_port().map_err(|e| format!("no free port: {e}"))?;
            let mut command = Command::new(&programs.vllm_router);
            command.args(["--host", "127.0.0.1", "--port", &port.to_string()]);
            command.args(["--policy", policy]);
            // Its metrics listener binds 29000 unless told otherwise: a
            // port of its own, so that runs (and other programs) do not
            // collide.
            command.args(["--prometheus-port", &prometheus.to_string()]);
            command.arg("--worker-urls").args(urls);
            (&programs.vllm_router, "/health", command)
        }
    };
    std::fs::create_dir_all(&programs.logs)
        .map_err(|e| format!("cannot create {}: {e}", programs.logs.display()))?;
    let log_path = programs.logs.join(format!("{label}.log"));
    let log = std::fs::File::create(&log_path)
        .map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
    let err = log.try_clone().map_err(|e| e.to_string())?;
    let child = command
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        // A backstop: `stop_all` kills and reaps it first.
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
    let pid = child.id().ok_or("the router exited at once")?;
    live().push((pid, child));
    eprintln!(
        "{label}: {kind} started, pid {pid}, log {}",
        log_path.display()
    );
    if let Err(error) = wait_healthy(pid, addr, health, &log_path).await {
        stop_pid(pid).await;
        return Err(error);
    }
    Ok(Running { addr, pid })
}

/// The exit status of the router `pid`, once it has exited.
fn exited(pid: u32) -> Option<std::process::ExitStatus> {
    let mut live = live();
    let (_, child) = live.iter_mut().find(|(p, _)| *p == pid)?;
    child.try_wait().ok().flatten()
}

/// Asks `GET health` every [`POLL_EVERY`] until it answers 200, the
/// router exits, or [`START_TIMEOUT`] passes.
async fn wait_healthy(pid: u32, addr: SocketAddr, health: &str, log: &Path) -> Result<(), String> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let url: http::Uri = format!("http://{addr}{health}")
        .parse()
        .map_err(|e| format!("{e}"))?;
    let until = Instant::now() + START_TIMEOUT;
    loop {
        if let Some(status) = exited(pid) {
            return Err(format!(
                "the router exited ({status}) before it was ready; see {}",
                log.display()
            ));
        }
        let ask = client.get(url.clone());
        if let Ok(Ok(rsp)) = tokio::time::timeout(POLL_EVERY * 10, ask).await {
            if rsp.status() == http::StatusCode::OK {
                return Ok(());
            }
        }
        if Instant::now() > until {
            return Err(format!(
                "not ready after {START_TIMEOUT:?} on {url}; see {}",
                log.display()
            ));
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

impl Running {
    /// Kills the router and waits for it to exit.
    pub async fn stop(self) {
        stop_pid(self.pid).await;
    }
}
