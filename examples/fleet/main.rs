//! The main job: the same inference workload, over real HTTP on loopback,
//! through each routing strategy, side by side.
//!
//! ```text
//! cargo run --release --example fleet [-- --requests 10000 --backends 8 --seed 1 --scenario default --json]
//! ```
//!
//! Each strategy gets a fresh fleet of simulated model servers (see
//! `tower_model_balance::sim`) and the same seeded workload: Zipf(1.1)
//! popularity over 32 models, 10% updates, open-loop Poisson arrivals at 30%
//! of the fleet's warm capacity, a 5 s deadline per request. In the
//! `default` scenario one backend answers 503 for the middle third of the
//! run; in `slow-tail` one answers 10% of its requests 10× slower.
//!
//! With `--explicit-load` the servers run in explicit model-control mode
//! (404 until a model is loaded through the KServe v2 repository API) and
//! `model_aware` places models itself (`tower_model_balance::placement`);
//! the baselines, which do not, fail on every model not loaded. The JSON's
//! `max_concurrent_loads` is the most load calls for one model any server
//! had in flight at once.

/// `println!` that ends the program quietly when stdout is closed (as when
/// piped into `head`).
macro_rules! emit {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if writeln!(std::io::stdout(), $($arg)*).is_err() {
            std::process::exit(0);
        }
    }};
}

mod args;
mod report;
mod strategies;
mod workload;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tower::ServiceExt;
use tower_model_balance::sim::{protocol, Fault, InferenceTimes, ModelServer, ServerConfig};

use args::{Args, Scenario, Stop};
use report::{Figures, Record};
use strategies::Strategy;
use workload::Planned;

const DEADLINE: Duration = Duration::from_secs(5);
const FAULTY: usize = 0;

#[tokio::main]
async fn main() {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(Stop::Help) => {
            emit!("{}", args::USAGE);
            return;
        }
        Err(Stop::Error(message)) => {
            eprintln!("error: {message}\n{}", args::USAGE);
            std::process::exit(2);
        }
    };
    let times = InferenceTimes::new(args.seed, 5, 30).expect("5..=30 ms is valid");
    let slots = match args.scenario {
        Scenario::Default => 5,
        Scenario::SlowTail => 16,
    };
    let config = ServerConfig::builder()
        .resident_slots(slots)
        .inference(times)
        .explicit_load(args.explicit_load)
        .repository((0..workload::MODELS).map(workload::model_name))
        .build()
        .expect("the scenario's config is valid");
    let rate = workload::arrival_rate(args.backends, config.concurrency(), &times);
    let plan = Arc::new(workload::plan(args.requests, rate, args.seed));
    if !args.json {
        let mode = if args.explicit_load {
            " · explicit model loading"
        } else {
            ""
        };
        emit!(
            "scenario {} · {} backends · {} requests per strategy · {:.0} req/s (30% of warm capacity) · seed {}{mode}",
            args.scenario, args.backends, args.requests, rate, args.seed
        );
    }
    let mut rows = Vec::new();
    for &name in &args.strategies {
        let figures = match run(name, &args, &config, plan.clone()).await {
            Ok(figures) => figures,
            Err(error) => {
                eprintln!("error: {name}: {error}");
                std::process::exit(1);
            }
        };
        if args.json {
            emit!(
                "{}",
                serde_json::to_string(&figures).expect("figures serialize")
            );
        }
        rows.push(figures);
    }
    if !args.json {
        report::print_table(&rows);
    }
}

async fn run(
    name: &str,
    args: &Args,
    config: &ServerConfig,
    plan: Arc<Vec<Planned>>,
) -> std::io::Result<Figures> {
    let mut servers = Vec::with_capacity(args.backends);
    for i in 0..args.backends {
        servers.push(ModelServer::start(&format!("sim-{i}"), config.clone()).await?);
    }
    if args.scenario == Scenario::SlowTail {
        servers[FAULTY].set_fault(Some(Fault::Slow {
            factor: 10,
            share: 0.1,
        }));
    }
    let (strategy, balancer) = strategies::build(
        name,
        &servers,
        config.resident_slots(),
        args.seed,
        args.explicit_load,
    );
    let handle = balancer.as_ref().map(|b| &b.handle);
    let records = drive(&strategy, &servers, &plan, args.scenario).await;
    let cold_loads = servers.iter().map(|s| s.stats().cold_loads).sum();
    let loads: Vec<u64> = servers.iter().map(|s| s.stats().work).collect();
    let trips = handle.map_or(0, |h| h.breaker_trips());
    if let (Some(handle), false) = (handle, args.json) {
        let s = handle.stats();
        emit!(
            "{name} routing: {} to a resident owner, {} to a cold owner, {} spilled, {} in panic mode, {} updates by P2C, {} without a backend; {} health ejections",
            s.resident_owner, s.cold_owner, s.spill, s.panic, s.update, s.no_backend, handle.ejections()
        );
        if let Some(p) = handle.placement_stats() {
            emit!(
                "{name} placement: {} loads ({} failed), {} unloads, {} reloads after a 404",
                p.loads,
                p.load_failures,
                p.unloads,
                p.reloads
            );
        }
    }
    let mut figures = report::figures(name, &records, cold_loads, trips, &loads);
    figures.max_concurrent_loads = servers
        .iter()
        .map(|s| s.stats().max_concurrent_loads_per_model)
        .max()
        .unwrap_or(0);
    Ok(figures)
}

/// Sends the planned requests open-loop and waits for every one to resolve
/// (or reach its deadline).
async fn drive(
    strategy: &Strategy,
    servers: &[ModelServer],
    plan: &[Planned],
    scenario: Scenario,
) -> Vec<Record> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let start = Instant::now();
    let n = plan.len();
    for (i, planned) in plan.iter().enumerate() {
        if scenario == Scenario::Default && i == n / 3 {
            servers[FAULTY].set_fault(Some(Fault::Unavailable));
        }
        if scenario == Scenario::Default && i == 2 * n / 3 {
            servers[FAULTY].set_fault(None);
        }
        tokio::time::sleep_until(start + planned.at).await;
        let request = build_request(planned);
        let strategy = strategy.clone();
        let tx = tx.clone();
        let inference = !planned.update;
        tokio::spawn(async move {
            let sent = Instant::now();
            let reply = tokio::time::timeout(DEADLINE, strategy.oneshot(request)).await;
            let (ok, cold) = match reply {
                Ok(Ok(reply)) => (reply.ok, reply.cold),
                _ => (false, false),
            };
            let _ = tx.send(Record {
                latency: sent.elapsed(),
                ok,
                cold,
                inference,
            });
        });
    }
    drop(tx);
    let mut records = Vec::with_capacity(n);
    while let Some(record) = rx.recv().await {
        records.push(record);
    }
    records
}

fn build_request(planned: &Planned) -> http::Request<Full<Bytes>> {
    let kind = if planned.update {
        "update"
    } else {
        "inference"
    };
    http::Request::post(protocol::infer_path(&planned.model))
        .header("x-model-id", planned.model.as_str())
        .header("x-request-kind", kind)
        .header("content-type", "application/json")
        .body(Full::from(
            r#"{"inputs":[{"name":"input0","datatype":"FP32","shape":[1],"data":[1.0]}]}"#,
        ))
        .expect("a valid request")
}
