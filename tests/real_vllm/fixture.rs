//! Real vLLM servers for the tests: vLLM 0.32.0's CPU build from the
//! virtual environment `scripts/vllm-venv` makes under `target/`, serving
//! a tiny random-weight model this fixture builds (`build_model.py`: no
//! model hub is reachable), each server a process group of its own on
//! 127.0.0.1 with one core, its compile cache under `target/` so a second
//! start takes about a minute instead of six.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use tower_model_balance_test_support::ports::free_ports;

/// The name the model is served under.
pub const MODEL: &str = "tiny";

/// The longest a server may take to come up: a cold start compiles the
/// model (6 to 8 minutes on two cores), a warm one loads the compiled
/// graphs (about a minute).
const START_BOUND: Duration = Duration::from_secs(1200);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The virtual environment's Python, if vLLM is installed there (its
/// stamp written), else `None` with the reason.
pub fn installed() -> Result<PathBuf, String> {
    let venv = root().join("target").join("venv-vllm");
    let python = venv.join("bin").join("python");
    match (python.exists(), venv.join(".installed").exists()) {
        (true, true) => Ok(python),
        _ => Err(format!(
            "vLLM is not installed at {} (`bash scripts/vllm-venv` installs it; `bash .ci/run` runs it)",
            venv.display()
        )),
    }
}

/// Builds the tiny model once (`target/vllm-model/tiny`, reused when
/// there); its folder.
pub fn model(python: &Path) -> PathBuf {
    let dir = root().join("target").join("vllm-model").join(MODEL);
    if dir.join("config.json").exists() {
        return dir;
    }
    let script = root()
        .join("tests")
        .join("real_vllm")
        .join("build_model.py");
    let status = Command::new(python)
        .arg(&script)
        .arg(&dir)
        .env("HF_HUB_OFFLINE", "1")
        .status()
        .expect("run build_model.py");
    assert!(status.success(), "building the tiny model failed: {status}");
    dir
}

/// One vLLM server: its OpenAI-compatible API on 127.0.0.1.
#[derive(Debug)]
pub struct Vllm {
    pub name: String,
    pub port: u16,
    /// Where its KV-cache events are published (its PUB binds) and
    /// replayed from.
    pub events_port: u16,
    pub replay_port: u16,
    core: usize,
    python: PathBuf,
    model: PathBuf,
    log: PathBuf,
    child: Mutex<Option<Child>>,
}

impl Vllm {
    /// A server on core `core`, not started yet.
    pub fn new(python: &Path, model: &Path, core: usize) -> Self {
        let [port, events_port, replay_port] = free_ports::<3>(20_000, 12_000);
        let logs = root().join("target").join("vllm-logs");
        std::fs::create_dir_all(&logs).expect("a folder for the logs");
        let log = logs.join(format!("{}-{core}.log", std::process::id()));
        Self {
            name: format!("vllm-{core}"),
            port,
            events_port,
            replay_port,
            core,
            python: python.to_owned(),
            model: model.to_owned(),
            log,
            child: Mutex::new(None),
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Its KV-cache events, as the gateway's `--kv-events` takes them.
    pub fn kv_events(&self) -> String {
        format!(
            "tcp://127.0.0.1:{},replay=tcp://127.0.0.1:{}",
            self.events_port, self.replay_port
        )
    }

    /// Starts the process (a process group of its own: the API server and
    /// its engine core).
    pub fn spawn(&self) {
        use std::os::unix::process::CommandExt;
        let cache = root().join("target").join("vllm-cache");
        let log = std::fs::File::create(&self.log).expect("log file");
        let err = log.try_clone().expect("log file");
        let child = Command::new(&self.python)
            .args(["-m", "vllm.entrypoints.openai.api_server", "--model"])
            .arg(&self.model)
            .args([
                "--served-model-name",
                MODEL,
                "--host",
                "127.0.0.1",
                "--port",
            ])
            .arg(self.port.to_string())
            .args([
                "--enable-prefix-caching",
                "--dtype",
                "float32",
                "--max-model-len",
                "2048",
                "--max-num-seqs",
                "16",
                // A KV cache of 64 blocks of 128 tokens (8,192 tokens):
                // the pressure of a real server's cache, under which the
                // workload of the affinity check (about 11,000 tokens of
                // distinct prefixes) does not fit on one server and fits
                // on two when each serves its own share.
                "--num-gpu-blocks-override",
                "64",
                // Its KV-cache events: a PUB it binds (`*`), a replay
                // ROUTER beside it (tests/real_vllm/precise.rs).
                "--kv-events-config",
            ])
            .arg(
                serde_json::json!({
                    "enable_kv_cache_events": true,
                    "publisher": "zmq",
                    "endpoint": format!("tcp://*:{}", self.events_port),
                    "replay_endpoint": format!("tcp://127.0.0.1:{}", self.replay_port),
                })
                .to_string(),
            )
            .env("VLLM_CPU_KVCACHE_SPACE", "1")
            .env("VLLM_CPU_OMP_THREADS_BIND", self.core.to_string())
            .env("OMP_NUM_THREADS", "1")
            .env("HF_HUB_OFFLINE", "1")
            .env("VLLM_NO_USAGE_STATS", "1")
            .env("DO_NOT_TRACK", "1")
            // `POST /reset_prefix_cache`, between the affinity runs.
            .env("VLLM_SERVER_DEV_MODE", "1")
            .env("VLLM_CACHE_ROOT", &cache)
            .env("TORCHINDUCTOR_CACHE_DIR", cache.join("inductor"))
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .process_group(0)
            .spawn()
            .expect("start vLLM");
        *self.lock() = Some(child);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends `signal` (`KILL`, `STOP`, `CONT`) to the server's process
    /// group.
    pub fn signal(&self, signal: &str) {
        let Some(pid) = self.lock().as_ref().map(Child::id) else {
            return;
        };
        // `--` before the group's negative ID, which would otherwise read
        // as an option.
        let status = Command::new("kill")
            .args(["-s", signal, "--"])
            .arg(format!("-{pid}"))
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -s {signal} -- -{pid}: {status}");
    }

    /// Kills the whole group (SIGKILL), as a crash would, and reaps it.
    pub fn kill(&self) {
        let Some(mut child) = self.lock().take() else {
            return;
        };
        // The whole group: the API server and its engine core.
        let _ = Command::new("kill")
            .args(["-s", "KILL", "--"])
            .arg(format!("-{}", child.id()))
            .status();
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Waits until `GET /health` answers 200; panics with the log's tail
    /// if the process exits first or the bound passes.
    pub async fn wait_ready(&self) {
        let client = reqwest::Client::new();
        let started = Instant::now();
        while started.elapsed() < START_BOUND {
            if let Some(child) = self.lock().as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!("{} exited ({status}):\n{}", self.name, self.log_tail());
                }
            }
            let health = client
                .get(format!("{}/health", self.url()))
                .timeout(Duration::from_secs(2))
                .send()
                .await;
            if health.is_ok_and(|r| r.status() == 200) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        panic!(
            "{} not ready within {START_BOUND:?}:\n{}",
            self.name,
            self.log_tail()
        );
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// The sum of the samples of `name` on its `/metrics` (0 when absent).
    pub async fn metric(&self, name: &str) -> f64 {
        let text = reqwest::get(format!("{}/metrics", self.url()))
            .await
            .expect("scrape")
            .text()
            .await
            .expect("scrape body");
        sum_of(&text, name)
    }
}

impl Drop for Vllm {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// The sum of the samples of the series `name` in a Prometheus text
/// scrape (every label set).
pub fn sum_of(scrape: &str, name: &str) -> f64 {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Two servers, one core each, started together and ready.
pub async fn fleet(python: &Path) -> Vec<Vllm> {
    let model = model(python);
    let servers: Vec<Vllm> = (0..2).map(|core| Vllm::new(python, &model, core)).collect();
    for server in &servers {
        server.spawn();
    }
    for server in &servers {
        server.wait_ready().await;
    }
    servers
}
