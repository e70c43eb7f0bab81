//! The bare proxy (`tower_model_balance_gateway::bare`): round robin over
//! the backends with the gateway's runtime, accept loop and pooled client,
//! and nothing else — the floor the peer comparison
//! (`docs/peer-comparison.md`) measures the gateway's hop against.
//!
//! ```text
//! cargo run --release -p tower-model-balance-gateway --bin bare-proxy -- \
//!     --listen 127.0.0.1:8081 --backend http://10.0.0.1:8000 --backend http://10.0.0.2:8000
//! ```

use std::process::ExitCode;

use tokio::net::TcpListener;

use tower_model_balance_gateway::bare::{Args, BareProxy, USAGE};
use tower_model_balance_gateway::{app, cli, say};

// The gateway's runtime: multi-threaded, a worker per core.
#[tokio::main]
async fn main() -> ExitCode {
    cli::init_tracing();
    let args = match cli::parse_or_exit(Args::parse, USAGE) {
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
    let proxy = BareProxy::new(&args.backends).ok_or("no backend")?;
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let backends: Vec<String> = args.backends.iter().map(ToString::to_string).collect();
    say!(
        "bare proxy on http://{addr} → {} (round robin)",
        backends.join(", ")
    );
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    app::serve(listener, proxy.into_service(), ctrl_c)
        .await
        .map_err(|e| format!("serving: {e}"))
}
