//! A registration sidecar: puts one backend's record in etcd under a lease,
//! keeps the lease alive, keeps the record's resident models as the server
//! lists them (its KServe v2 repository index, or its OpenAI model list),
//! and revokes the lease on Ctrl-C or SIGTERM, so that every gateway
//! watching the prefix (`gateway --etcd URL --prefix P`) drops the
//! backend at once; killed, the backend leaves within the lease's TTL.
//!
//! ```text
//! etcd --data-dir /tmp/etcd-demo &
//! cargo install --path crates/gateway    # or, from a clone: cargo run --release -p tower-model-balance-gateway --bin etcd-register --
//! etcd-register --etcd http://127.0.0.1:2379 \
//!     --prefix /models/backends/ --id gpu-0 --address http://10.0.0.1:8000 --ttl 5
//! # or a simulated model server (`sims --explicit --count 1` prints sim-0=URL):
//! etcd-register --etcd http://127.0.0.1:2379 \
//!     --prefix /models/backends/ --id sim-0 --address http://127.0.0.1:41023
//! ```
//!
//! The record is schema version 1 of `tower_model_balance::discover::etcd`
//! (`encode_record`): `{"version": 1, "address": ..., "weight": ...,
//! "model_slots": ..., "models": [...], "metrics_address": ...}`.

use std::process::ExitCode;

use tower_model_balance_gateway::register::args::{self, Args};
use tower_model_balance_gateway::register::sidecar::Sidecar;
use tower_model_balance_gateway::{cli, say};

#[tokio::main]
async fn main() -> ExitCode {
    cli::init_tracing();
    let args = match cli::parse_or_exit(Args::parse, args::USAGE) {
        Ok(args) => args,
        Err(code) => return code,
    };
    match run(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args) -> Result<(), String> {
    let stop = stop_signal()?;
    let sidecar = Sidecar::start(args).await?;
    let meta = sidecar.registration.meta().await;
    let address = meta.address().map(ToString::to_string).unwrap_or_default();
    say!(
        "registered {} ({address}) as {}{} under lease {:x}, ttl {} s; its resident models every {} ms",
        meta.id(),
        args.prefix,
        meta.id(),
        sidecar.registration.lease_id().await,
        args.ttl.as_secs(),
        args.interval.as_millis()
    );
    // Say what the record holds as it changes, until told to stop.
    let mut models = None;
    let mut ticks = tokio::time::interval(args.interval);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            _ = ticks.tick() => {
                let now = sidecar.registration.meta().await.resident_models().to_vec();
                if models.as_ref() != Some(&now) {
                    let names: Vec<&str> = now.iter().map(|m| m.as_str()).collect();
                    say!("models in the record: [{}]", names.join(", "));
                    models = Some(now);
                }
            }
        }
    }
    sidecar.stop().await?;
    say!("deregistered {} (lease revoked)", meta.id());
    Ok(())
}

/// Resolves on Ctrl-C (SIGINT) or, on Unix, SIGTERM.
fn stop_signal() -> Result<impl std::future::Future<Output = ()>, String> {
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot listen for SIGTERM: {e}"))?;
    Ok(async move {
        #[cfg(unix)]
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    })
}
