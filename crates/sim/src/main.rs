//! Simulated model servers as a program: starts N of them on 127.0.0.1,
//! prints each one as `NAME=URL` on standard output (a line each, the
//! value of a gateway's `--backend`), and serves until Ctrl-C or SIGTERM.
//!
//! ```text
//! cargo run --release -p tower-model-balance-sim --bin sims -- --count 3
//! sim-0=http://127.0.0.1:41023
//! sim-1=http://127.0.0.1:39877
//! sim-2=http://127.0.0.1:45311
//! ```
//!
//! A gateway in front (`crates/gateway`): `gateway --no-placement
//! --backend sim-0=http://127.0.0.1:41023 …` (the servers load a model
//! when a request names it); with `--explicit` they load only through
//! their repository API, as Triton in explicit model-control mode, and a
//! gateway with placement (its default) loads the models it routes; or
//! register each in etcd: `etcd-register --id sim-0 --address
//! http://127.0.0.1:41023 …`.

use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;

use clap::Parser;
use tower_model_balance_sim::{Fault, ModelServer, ServerConfig};

/// The models a server started with `--explicit` has in its repository:
/// those the gateway's usage examples ask for.
const EXPLICIT_MODELS: [&str; 3] = ["bge-small", "llama-3-8b", "resnet-50"];

/// Simulated model servers (KServe v2 with Triton's repository API,
/// OpenAI-compatible routes, vLLM-style /metrics) on 127.0.0.1. Each is
/// printed as NAME=URL on standard output, a line each (a gateway's
/// --backend value); they serve until Ctrl-C or SIGTERM.
#[derive(Debug, Parser)]
#[command(name = "sims", version)]
struct Args {
    /// How many servers, named sim-0, sim-1, … (default 3, or one per
    /// --port).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=16))]
    count: Option<u16>,
    /// A server's port on 127.0.0.1 (repeatable, one per server, in
    /// order); default: a free port each.
    #[arg(long = "port", value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    ports: Vec<u16>,
    /// Explicit model-control mode: bge-small, llama-3-8b and resnet-50
    /// in each server's repository, loaded only through its repository
    /// API, as on Triton with --model-control-mode=explicit (a gateway
    /// with placement loads them); without it a server loads a model when
    /// a request names it (a gateway in front: --no-placement).
    #[arg(long)]
    explicit: bool,
    /// Every server answers 503 (every owner down): a gateway in front
    /// answers 503 itself after a few requests, with Retry-After, and so
    /// does its readiness.
    #[arg(long)]
    down: bool,
}

impl Args {
    /// The servers' addresses: the `--port`s, else `--count` free ports.
    fn addrs(&self) -> Result<Vec<SocketAddr>, String> {
        let addr = |port: u16| SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        match (self.count, self.ports.len()) {
            (count, 0) => Ok(vec![addr(0); usize::from(count.unwrap_or(3))]),
            (Some(count), ports) if usize::from(count) != ports => Err(format!(
                "--count {count} and {ports} --port: one port for each server"
            )),
            (_, 17..) => Err("at most 16 servers (--port)".into()),
            _ => Ok(self.ports.iter().copied().map(addr).collect()),
        }
    }

    /// Each server's configuration.
    fn server(&self) -> Result<ServerConfig, String> {
        if !self.explicit {
            return Ok(ServerConfig::default());
        }
        ServerConfig::builder()
            .explicit_load(true)
            .repository(EXPLICIT_MODELS)
            .build()
            .map_err(|e| e.to_string())
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("error: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args) -> Result<(), String> {
    let addrs = match args.addrs() {
        Ok(addrs) => addrs,
        Err(message) => {
            use clap::CommandFactory as _;
            Args::command()
                .error(clap::error::ErrorKind::ArgumentConflict, message)
                .exit()
        }
    };
    let stop = stop_signal()?;
    let config = args.server()?;
    // Kept while serving: a server stops when dropped.
    let mut servers = Vec::new();
    for (i, addr) in addrs.into_iter().enumerate() {
        let name = format!("sim-{i}");
        let server = ModelServer::start_on(&name, config.clone(), addr)
            .await
            .map_err(|e| format!("starting {name} on {addr}: {e}"))?;
        if args.down {
            server.set_fault(Some(Fault::Unavailable));
        }
        servers.push(server);
    }
    let backends: Vec<String> = servers
        .iter()
        .map(|s| format!("{}=http://{}", s.name(), s.addr()))
        .collect();
    // A closed standard output (`sims | head -1`) stops nothing.
    let _ = writeln!(std::io::stdout().lock(), "{}", backends.join("\n"));
    let mode = match args.explicit {
        true => "their repositories hold bge-small, llama-3-8b, resnet-50 (explicit mode)",
        false => "each loads a model when a request names it",
    };
    let placement = if args.explicit { "" } else { " --no-placement" };
    let flags: Vec<String> = backends.iter().map(|b| format!("--backend {b}")).collect();
    let _ = writeln!(
        std::io::stderr().lock(),
        "{} simulated servers, {mode}{}; Ctrl-C or SIGTERM stops them. A gateway in front:\n\n  gateway{placement} {}\n",
        servers.len(),
        if args.down { ", every one answering 503 (--down)" } else { "" },
        flags.join(" ")
    );
    stop.await;
    for server in servers {
        server.stop().await;
    }
    Ok(())
}

/// Resolves at the first SIGTERM or SIGINT (Ctrl-C).
fn stop_signal() -> Result<impl std::future::Future<Output = ()>, String> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(|e| format!("SIGTERM: {e}"))?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| format!("SIGINT: {e}"))?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}
