//! The routers compared, each started as a subprocess on a free port in
//! front of a fresh fleet, ready once its health route answers 200.

use std::fmt;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::process::{Child, Command};
use tokio::time::Instant;

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
    /// The gateway (`crates/gateway`), this crate's stack.
    Gateway,
    /// vLLM Router with the policy named.
    Vllm(String),
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Direct => f.write_str("direct"),
            Kind::Gateway => f.write_str("gateway"),
            Kind::Vllm(policy) => write!(f, "vllm-router {policy}"),
        }
    }
}

/// Where the routers' programs are, and where their output goes.
#[derive(Debug, Clone)]
pub struct Programs {
    pub gateway: PathBuf,
    pub vllm_router: PathBuf,
    pub logs: PathBuf,
}

/// A router running: killed when dropped.
#[derive(Debug)]
pub struct Running {
    child: Child,
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
    label: &str,
) -> Result<Running, String> {
    let port = free_port().map_err(|e| format!("no free port: {e}"))?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let urls = servers.iter().map(|s| format!("http://{s}"));
    let (program, health, mut command) = match kind {
        Kind::Direct => return Err("the direct row has no router".into()),
        Kind::Gateway => {
            let mut command = Command::new(&programs.gateway);
            command.args(["--listen", &addr.to_string()]);
            for url in urls {
                command.args(["--backend", &url]);
            }
            // vLLM-like servers: their model list is `/v1/models`, and they
            // load a model when a request names it.
            command.args(["--probe", "openai", "--no-placement"]);
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
    let mut child = command
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
    let pid = child.id().ok_or("the router exited at once")?;
    wait_healthy(&mut child, addr, health, &log_path).await?;
    Ok(Running { child, addr, pid })
}

/// Asks `GET health` every [`POLL_EVERY`] until it answers 200, the
/// router exits, or [`START_TIMEOUT`] passes.
async fn wait_healthy(
    child: &mut Child,
    addr: SocketAddr,
    health: &str,
    log: &Path,
) -> Result<(), String> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let url: http::Uri = format!("http://{addr}{health}")
        .parse()
        .map_err(|e| format!("{e}"))?;
    let until = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
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
    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}
