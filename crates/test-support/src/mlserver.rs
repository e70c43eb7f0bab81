//! Real model servers from PyPI on 127.0.0.1 for the real-server tests:
//! MLServer 1.7.1 (KServe v2, explicit model control) and KServe's own
//! Python model server, each a child process with the tiny runtime in
//! `tests/mlserver/` (modelled load and inference times, no weights).
//!
//! The servers come from virtual environments under `target/` that
//! `.ci/run` makes (`target/venv` with `mlserver` and `tritonclient[http]`,
//! `target/venv-kserve` with `kserve`). Where one is missing, a test using
//! it is skipped with a message — except under `CI`, where a missing
//! server is a failure: the real servers are the judge, and CI must not
//! pass by skipping them.
//!
//! Their HTTP helpers are in `mlserver_http.rs`, included beside this file
//! (and re-exported here).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;

pub use crate::mlserver_http::{client, get, infer_body, post};

use crate::ports::free_ports;

/// Which real server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// MLServer 1.7.1: models loaded only through
    /// `POST /v2/repository/models/{m}/load`; metrics on a port of their
    /// own.
    MlServer,
    /// KServe's Python `ModelServer` (kserve 0.21): every model loaded at
    /// start, metrics on the HTTP port, no repository index.
    KServe,
}

impl Kind {
    fn venv(self) -> &'static str {
        match self {
            Kind::MlServer => "venv",
            Kind::KServe => "venv-kserve",
        }
    }

    fn program(self) -> &'static str {
        match self {
            Kind::MlServer => "mlserver",
            Kind::KServe => "python",
        }
    }
}

/// How the models behave.
#[derive(Debug, Clone)]
pub struct Models {
    /// Model names, `m0`, `m1`, …
    pub names: Vec<String>,
    /// How long a load takes.
    pub load: Duration,
    /// How long one inference takes.
    pub predict: Duration,
    /// Models of their own (MLServer only): a name and its runtime's
    /// `parameters.extra` (`fail_load`, `fail_predict`: see
    /// `tests/mlserver/sleepy.py`).
    pub special: Vec<(String, serde_json::Value)>,
}

impl Models {
    /// `n` models named `m0` … `m{n-1}`.
    pub fn new(n: usize, load: Duration, predict: Duration) -> Self {
        Self {
            names: (0..n).map(|i| format!("m{i}")).collect(),
            load,
            predict,
            special: Vec::new(),
        }
    }

    /// With a model `name` whose runtime has `extra` parameters besides
    /// the load and inference times.
    pub fn with(mut self, name: &str, extra: serde_json::Value) -> Self {
        self.special.push((name.to_owned(), extra));
        self
    }
}

/// The repository's root (this crate is `crates/test-support` in it):
/// where `.ci/run` makes the servers' virtual environments (`target/`) and
/// where their models and scripts are (`tests/mlserver/`).
pub fn root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.ancestors().nth(2).map_or(here.clone(), PathBuf::from)
}

/// The server's executable, or `None` (with a message) when it is not
/// installed outside CI. Under `CI` a missing server panics.
pub fn installed(kind: Kind) -> Option<PathBuf> {
    let program = root()
        .join("target")
        .join(kind.venv())
        .join("bin")
        .join(kind.program());
    let module_ok = program.exists()
        && match kind {
            Kind::MlServer => true,
            Kind::KServe => Command::new(&program)
                .args(["-c", "import kserve"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success()),
        };
    if module_ok {
        return Some(program);
    }
    let message = format!(
        "{kind:?} is not installed at {} (`bash .ci/run` installs it)",
        program.display()
    );
    if std::env::var_os("CI").is_some() {
        panic!("{message}: under CI the real-server tests must run");
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

/// A folder of its own under the system's temporary folder, removed when
/// dropped.
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(label: &str) -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tmb-{label}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create a scratch folder");
        Self(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One real server process on 127.0.0.1.
#[derive(Debug)]
pub struct Server {
    pub kind: Kind,
    pub name: String,
    /// The HTTP (KServe v2 REST) address.
    pub http: SocketAddr,
    /// Where its Prometheus metrics are served (MLServer: its own port).
    pub metrics: SocketAddr,
    program: PathBuf,
    dir: PathBuf,
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
    child: Option<Child>,
}

/// How a server of `kind` is started on `ports` (HTTP, gRPC, metrics):
/// its arguments and environment, and where its metrics are served.
fn launch(
    kind: Kind,
    [http, grpc, metrics]: [u16; 3],
    repository: &Path,
    models: &Models,
) -> (Vec<String>, Vec<(&'static str, String)>, u16) {
    match kind {
        Kind::MlServer => {
            // Settings from the environment: `mlserver start DIR` takes DIR
            // as the model repository (a settings.json's
            // `model_repository_root` is overridden by it), and every server
            // shares the one repository.
            let env = vec![
                ("MLSERVER_HOST", "127.0.0.1".to_owned()),
                ("MLSERVER_HTTP_PORT", http.to_string()),
                ("MLSERVER_GRPC_PORT", grpc.to_string()),
                ("MLSERVER_METRICS_PORT", metrics.to_string()),
                ("MLSERVER_LOAD_MODELS_AT_STARTUP", "false".to_owned()),
                ("MLSERVER_PARALLEL_WORKERS", "0".to_owned()),
            ];
            let args = vec!["start".to_owned(), repository.display().to_string()];
            (args, env, metrics)
        }
        Kind::KServe => {
            let script = root()
                .join("tests")
                .join("mlserver")
                .join("kserve_server.py");
            let mut args = vec![
                script.display().to_string(),
                format!("--http_port={http}"),
                format!("--grpc_port={grpc}"),
                format!("--load_seconds={}", models.load.as_secs_f64()),
                format!("--predict_seconds={}", models.predict.as_secs_f64()),
            ];
            args.extend(models.names.iter().map(|m| format!("--model={m}")));
            (args, Vec::new(), http)
        }
    }
}

impl Server {
    /// Starts the process and waits (bounded) until it answers
    /// `GET /v2/health/live`.
    fn spawn(&mut self) {
        let log = std::fs::File::create(self.dir.join("server.log")).expect("log file");
        let err = log.try_clone().expect("log file");
        let child = Command::new(&self.program)
            .args(&self.args)
            .current_dir(&self.dir)
            .env("PYTHONPATH", root().join("tests").join("mlserver"))
            .env("PYTHONUNBUFFERED", "1")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.program.display()));
        self.child = Some(child);
    }

    /// Kills the process (SIGKILL) and reaps it: as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same ports, empty (nothing loaded), and
    /// waits until it is live.
    pub async fn restart(&mut self) {
        self.kill();
        self.spawn();
        self.wait_live().await;
    }

    /// Waits until `GET /v2/health/live` answers 200: each try is one
    /// request (a refused connection fails at once), at most 600 tries
    /// 100 ms apart, and the process must still be running.
    pub async fn wait_live(&mut self) {
        if let Err(log) = self.try_wait_live().await {
            panic!("{} exited before it was live:\n{log}", self.name);
        }
    }

    /// As [`Server::wait_live`], but a process that exited is an `Err`
    /// with its log's tail.
    async fn try_wait_live(&mut self) -> Result<(), String> {
        let client = client();
        for _ in 0..600 {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("{status}: {}", self.log_tail()));
                }
            }
            if get(&client, self.http, "/v2/health/live").await.0 == 200 {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{} not live within 60 s:\n{}", self.name, self.log_tail());
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// The models its repository index lists `READY` (MLServer only).
    pub async fn ready_models(&self) -> Vec<String> {
        let (status, body) = post(
            &client(),
            self.http,
            "/v2/repository/index",
            Bytes::from_static(b"{}"),
        )
        .await;
        assert_eq!(
            status, 200,
            "{}: index answered {status}: {body}",
            self.name
        );
        let index: serde_json::Value = serde_json::from_str(&body).expect("index JSON");
        let mut ready: Vec<String> = index
            .as_array()
            .expect("an array")
            .iter()
            .filter(|e| e["state"] == "READY")
            .filter_map(|e| e["name"].as_str().map(str::to_owned))
            .collect();
        ready.sort();
        ready
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Several servers of one kind over one model repository.
#[derive(Debug)]
pub struct Fleet {
    pub servers: Vec<Server>,
    pub models: Models,
    _scratch: Scratch,
}

impl Fleet {
    /// Starts `n` servers of `kind` with `models`, all live before it
    /// returns; `None` when `kind` is not installed (outside CI).
    ///
    /// MLServer: explicit model control (`load_models_at_startup: false`,
    /// nothing loaded until `POST /v2/repository/models/{m}/load`), no
    /// worker processes (`parallel_workers: 0`). KServe: every model loaded
    /// at start.
    pub async fn start(kind: Kind, n: usize, models: Models) -> Option<Self> {
        let program = installed(kind)?;
        let scratch = Scratch::new(match kind {
            Kind::MlServer => "mlserver",
            Kind::KServe => "kserve",
        });
        let repository = scratch.path().join("models");
        let plain = models.names.iter().map(|n| (n, serde_json::json!({})));
        let special = models.special.iter().map(|(n, extra)| (n, extra.clone()));
        for (name, extra) in plain.chain(special) {
            let dir = repository.join(name);
            std::fs::create_dir_all(&dir).expect("model folder");
            let mut extra = extra;
            extra["load_seconds"] = models.load.as_secs_f64().into();
            extra["predict_seconds"] = models.predict.as_secs_f64().into();
            let settings = serde_json::json!({
                "name": name,
                "implementation": "sleepy.SleepyModel",
                "parameters": {"extra": extra},
            });
            std::fs::write(dir.join("model-settings.json"), settings.to_string())
                .expect("model-settings.json");
        }
        let mut servers = Vec::new();
        for i in 0..n {
            let dir = scratch.path().join(format!("server-{i}"));
            std::fs::create_dir_all(&dir).expect("server folder");
            let (args, env, metrics) = launch(kind, [0; 3], &repository, &models);
            servers.push(Server {
                kind,
                name: format!("{kind:?}-{i}").to_lowercase(),
                http: SocketAddr::from(([127, 0, 0, 1], 0)),
                metrics: SocketAddr::from(([127, 0, 0, 1], metrics)),
                program: program.clone(),
                dir,
                args,
                env,
                child: None,
            });
        }
        // Ports are free when chosen, not reserved: a server that lost one
        // to another process before it bound it gets new ones (at most 5
        // tries).
        let mut pending: Vec<usize> = (0..n).collect();
        for attempt in 0.. {
            for &i in &pending {
                // 20000..32000: apart from etcd's 10000..20000.
                let ports: [u16; 3] = free_ports(20_000, 12_000);
                let (args, env, metrics) = launch(kind, ports, &repository, &models);
                let server = &mut servers[i];
                (server.args, server.env) = (args, env);
                server.http = SocketAddr::from(([127, 0, 0, 1], ports[0]));
                server.metrics = SocketAddr::from(([127, 0, 0, 1], metrics));
                server.spawn();
            }
            let mut lost = Vec::new();
            for &i in &pending {
                if let Err(log) = servers[i].try_wait_live().await {
                    let taken = log.contains("address already in use");
                    assert!(
                        taken && attempt < 4,
                        "{} exited before it was live: {log}",
                        servers[i].name
                    );
                    lost.push(i);
                }
            }
            if lost.is_empty() {
                break;
            }
            pending = lost;
        }
        Some(Self {
            servers,
            models,
            _scratch: scratch,
        })
    }
}
