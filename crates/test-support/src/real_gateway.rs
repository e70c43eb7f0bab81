//! The gateway's app (`crates/gateway`) in front of a fleet of real servers, for
//! `tests/real_servers.rs`; and tritonclient run against it.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tower_model_balance::backend::BackendId;
use tower_model_balance::balance::BalancerHandle;
use tower_model_balance::endpoint::Origin;

use crate::mlserver::{self, Fleet, Kind};
use tower_model_balance_gateway::app::{self, Config, Gateway};

/// The gateway serving on loopback in front of a fleet.
pub struct Running {
    pub addr: SocketAddr,
    pub handle: BalancerHandle,
    /// Its probes and placement live as long as it.
    pub _gateway: Arc<Gateway>,
    pub server: JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Starts the gateway in front of `fleet`: each server's HTTP origin, its
/// metrics origin, probes once a second; `edit` changes the config first.
pub async fn gateway(fleet: &Fleet, edit: impl FnOnce(&mut Config)) -> Running {
    let backends: Vec<_> = fleet
        .servers
        .iter()
        .map(|s| (BackendId::new(&s.name).unwrap(), Origin::http(s.http)))
        .collect();
    let metrics = fleet
        .servers
        .iter()
        .map(|s| (BackendId::new(&s.name).unwrap(), Origin::http(s.metrics)))
        .collect();
    let mut config = Config::new(backends);
    config.metrics_origins = metrics;
    edit(&mut config);
    let gateway = Arc::new(Gateway::new(config).unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = gateway.router.clone();
    let server = tokio::spawn(async move {
        app::serve(listener, router, std::future::pending())
            .await
            .unwrap();
    });
    Running {
        addr,
        handle: gateway.handle.clone(),
        _gateway: gateway,
        server,
    }
}

/// Runs `tests/mlserver/triton_client.py` (tritonclient from the MLServer
/// environment) against the gateway at `addr` with `args`; its output.
/// Panics if it fails.
pub async fn tritonclient(addr: SocketAddr, args: &[&str]) -> String {
    let python = mlserver::installed(Kind::MlServer)
        .expect("tritonclient is installed with MLServer")
        .with_file_name("python");
    let script = mlserver::root().join("tests/mlserver/triton_client.py");
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .arg(script)
            .arg(addr.to_string())
            .args(args)
            .output()
            .expect("run python")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    eprint!("{stdout}");
    assert!(
        output.status.success(),
        "tritonclient failed: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}
