//! vLLM Router (`vllm-router` from PyPI, the venv `.ci/run` installs under
//! `target/venv-vllm-router`) in front of the same two servers: a peer's
//! row in the precise-routing table.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use tower_model_balance_test_support::ports::free_ports;

use crate::fixture::Vllm;
use crate::gateway::client;

/// A running vLLM Router.
pub struct Router {
    pub url: String,
    child: Child,
}

impl Drop for Router {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// vLLM Router's program, if installed.
fn program() -> Result<PathBuf, String> {
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/venv-vllm-router");
    let program = venv.join("bin/vllm-router");
    match (program.exists(), venv.join(".installed").exists()) {
        (true, true) => Ok(program),
        _ => Err(format!(
            "vLLM Router is not installed at {}",
            venv.display()
        )),
    }
}

/// vLLM Router with `policy` in front of `servers`, healthy; an error if
/// it is not installed or does not start within 60 s.
pub async fn start(servers: &[Vllm], policy: &str) -> Result<Router, String> {
    let program = program()?;
    let [port, prometheus] = free_ports::<2>(33_000, 8_000);
    let log = std::env::temp_dir().join(format!("vllm-router-{policy}-{port}.log"));
    let out = std::fs::File::create(&log).map_err(|e| e.to_string())?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let child = Command::new(program)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--policy", policy])
        .args(["--prometheus-port", &prometheus.to_string()])
        .arg("--worker-urls")
        .args(servers.iter().map(Vllm::url))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("start vllm-router: {e}"))?;
    let mut router = Router {
        url: format!("http://127.0.0.1:{port}"),
        child,
    };
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        if let Ok(Some(status)) = router.child.try_wait() {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            return Err(format!("vllm-router exited ({status}): {log}"));
        }
        let health = client()
            .get(format!("{}/health", router.url))
            .timeout(Duration::from_secs(2))
            .send()
            .await;
        if health.is_ok_and(|r| r.status() == 200) {
            return Ok(router);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    Err(format!("vllm-router not healthy within 60 s: {log}"))
}
