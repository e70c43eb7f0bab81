//! An axum inference gateway: the OpenAI-compatible routes
//! (`POST /v1/chat/completions`, `/v1/completions`, `/v1/embeddings`) and
//! the KServe v2 REST route (`POST /v2/models/{name}/infer`, also
//! `…/versions/{v}/infer`) go through the crate's stack — the model ID
//! from the body or the path, the model-aware balancer with its breakers
//! and health probes, a hyper-util client per backend — to the backends;
//! `GET /metrics` serves the balancer's figures in Prometheus text, and
//! `gateway_errors_total{code}`, the gateway's own error answers.
//!
//! ```text
//! cargo install --path crates/gateway    # or, from a clone: cargo run --release -p tower-model-balance-gateway --bin gateway --
//! gateway --backend http://10.0.0.1:8000 --backend http://10.0.0.2:8000
//! gateway --etcd http://127.0.0.1:2379 --prefix /models/backends/
//! ```
//!
//! To try it without model servers, the simulated ones of `crates/sim`:
//! `sims --count 3` prints a `--backend NAME=URL` value for each (they
//! load a model when a request names it: `--no-placement`; `sims --down`
//! answers 503, to watch the gateway's own 503 with `Retry-After`).
//!
//! With `--etcd` the backends are the records under the prefix (written by
//! `etcd-register`, or any writer of the schema in
//! `tower_model_balance::discover::etcd`): every gateway replica watching
//! it has the same fleet, so the same owners for every model.
//!
//! It also answers KServe v2's `GET /v2/health/live`, `/v2/health/ready`,
//! `/v2` and model metadata and readiness (`GET /v2/models/{name}`,
//! `…/ready`, forwarded to an owner), so a KServe v2 client such as
//! tritonclient works through it. With KServe v2 probes (the default) it
//! loads models where it routes them (placement; `--no-placement` for
//! servers that load on demand):
//!
//! ```text
//! # four MLServer instances in explicit model-control mode, metrics on 8082
//! gateway --backend http://10.0.0.1:8080 \
//!     --backend http://10.0.0.2:8080 --metrics-port 8082
//! ```
//!
//! Errors of the stack become statuses with an OpenAI-shaped JSON body
//! (see `app/errors.rs`): 400 for a bad model ID, 413 for a body over the
//! limit (64 MiB by default, `--body-limit`), 503 with `Retry-After` when
//! no backend can take the request.

use std::process::ExitCode;
use std::time::Duration;

use tokio::net::TcpListener;

use tower_model_balance_gateway::app::{self, Gateway};
use tower_model_balance_gateway::args::{self, Args};
use tower_model_balance_gateway::{cli, note};

#[tokio::main]
async fn main() -> ExitCode {
    cli::init_tracing();
    let args = match cli::parse_or_exit(Args::parse, args::USAGE) {
        Ok(args) => args,
        Err(code) => return code,
    };
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let config = args.config()?;
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let backends = match &config.etcd {
        Some(etcd) => format!(
            "the backends under {} in etcd at {}",
            etcd.prefix,
            etcd.endpoints.join(", ")
        ),
        None => {
            let list: Vec<String> = config
                .backends
                .iter()
                .map(|(id, origin)| format!("{id} {origin}"))
                .collect();
            list.join(", ")
        }
    };
    let admin = TcpListener::bind(args.admin_listen).await.map_err(|e| {
        format!(
            "cannot listen on {} (--admin-listen): {e}",
            args.admin_listen
        )
    })?;
    let admin_addr = admin.local_addr().map_err(|e| e.to_string())?;
    // A wrong etcd password stops the gateway here, named.
    if let Some(etcd) = &config.etcd {
        etcd.check().await.map_err(|e| e.to_string())?;
    }
    let gateway = Gateway::new(config).map_err(|e| e.to_string())?;
    note!("gateway on http://{addr} → {backends}");
    note!("admin on http://{admin_addr}: /metrics, /ready, /live");
    note!("{}", try_it(reachable(addr), reachable(admin_addr)));
    let signalled = std::sync::Arc::new(std::sync::OnceLock::new());
    let signal = shutdown_signal()?;
    let signal = {
        let signalled = signalled.clone();
        async move {
            signal.await;
            let _ = signalled.set(tokio::time::Instant::now());
        }
    };
    // The admin listener serves through the drain (readiness says 503),
    // and stops once the gateway's own listener is done.
    let (admin_stop, admin_stopped) = tokio::sync::oneshot::channel::<()>();
    let mut admin_config = app::ServeConfig::default();
    admin_config.listener = "admin";
    let admin_drain = app::Drain::new();
    let admin_router = gateway.admin.clone();
    let admin_task = tokio::spawn(async move {
        let stopped = async {
            let _ = admin_stopped.await;
        };
        app::serve_with(admin, admin_router, stopped, admin_config, &admin_drain).await
    });
    let drain = gateway.drain.clone();
    app::serve_with(listener, gateway.router.clone(), signal, args.serve, &drain)
        .await
        .map_err(|e| format!("serving: {e}"))?;
    if let Some(at) = signalled.get() {
        let cut = match drain.is_cut() {
            true => " (answers still open at --drain-timeout were cut)",
            false => "",
        };
        note!("drained in {:.1} s{cut}", at.elapsed().as_secs_f64());
    }
    let _ = admin_stop.send(());
    let _ = admin_task.await;
    // The access log's lines still queued: 2 s to be written, on a
    // thread of the runtime's blocking pool.
    let flushed = tokio::task::spawn_blocking(move || {
        let lost = gateway.flush_access_log(Duration::from_secs(2));
        (gateway, lost)
    });
    let (gateway, lost) = flushed.await.map_err(|e| e.to_string())?;
    if let Some(lost @ 1..) = lost {
        note!("access log: {lost} lines lost (the reader of standard output was behind, or gone; gateway_access_log_dropped_total)");
    }
    let s = gateway.handle.stats();
    note!(
        "routed: {} to a resident owner, {} to a cold owner, {} spilled, {} without a backend, {} invalid; {} breaker trips, {} of (backend, model) pairs ({} open now)",
        s.resident_owner,
        s.cold_owner,
        s.spill,
        s.no_backend,
        s.invalid_route,
        s.breaker_trips,
        s.pair_breaker_trips,
        gateway.handle.backends().iter().map(|b| b.pair_breakers_open).sum::<usize>()
    );
    if let Some(etcd) = gateway.etcd.as_ref().map(|h| h.stats()) {
        note!(
            "etcd: at revision {}, {} changes applied, {} snapshots, {} watches resumed, {} invalid records",
            etcd.revision,
            etcd.events,
            etcd.snapshots,
            etcd.resumes,
            etcd.invalid_records
        );
    }
    let h = gateway.hedge.stats();
    note!(
        "hedged: {} of {} requests ({} after a fast failure), {} won; suppressed by budget {}, by load {}, by no alternative {}; {} sent once (not safe to send twice)",
        h.hedges,
        h.requests,
        h.hedges_after_failure,
        h.hedges_won,
        h.suppressed_by_budget,
        h.suppressed_by_load,
        h.suppressed_by_no_alternative,
        h.send_once
    );
    Ok(())
}

/// Resolves at the first SIGTERM (Kubernetes' and systemd's stop) or
/// SIGINT (Ctrl-C), which begins the drain.
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>, String> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(|e| format!("SIGTERM: {e}"))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| format!("SIGINT: {e}"))?;
    Ok(async move {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        note!("{name}: draining (readiness 503, no new connections)");
    })
}

/// `addr` as a client on this host reaches it: a wildcard listen address
/// (`0.0.0.0`, `[::]`) as the loopback.
fn reachable(addr: std::net::SocketAddr) -> std::net::SocketAddr {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => (Ipv4Addr::LOCALHOST, addr.port()).into(),
        IpAddr::V6(ip) if ip.is_unspecified() => (Ipv6Addr::LOCALHOST, addr.port()).into(),
        _ => addr,
    }
}

/// The curl lines printed on start: the fleet's model list, readiness
/// and metrics.
fn try_it(addr: std::net::SocketAddr, admin: std::net::SocketAddr) -> String {
    format!(
        "\nTry it (Ctrl-C or SIGTERM drains and stops):\n\n  curl -s http://{addr}/v1/models    # the models the backends' probes found\n  curl -s http://{admin}/ready\n  curl -s http://{admin}/metrics | grep '^model_balance_'\n"
    )
}
