//! The main job: the same inference workload, over real HTTP on loopback,
//! through each routing strategy, side by side.
//!
//! ```text
//! cargo run --release --bin fleet [-- --requests 10000 --backends 8 --seed 1 --scenario default --load 0.3 --json]
//! ```
//!
//! Each strategy gets a fresh fleet of simulated model servers (see
//! `tower_model_balance_sim`) and the same seeded workload: Zipf(1.1)
//! popularity over 32 models, 10% updates, open-loop Poisson arrivals at 30%
//! of the fleet's warm capacity, a 5 s deadline per request. In the
//! `default` scenario one backend answers 503 for the middle third of the
//! run; in `slow-tail` one answers 10% of its requests 10× slower, and
//! 2 000 uncounted warm-up requests go first (the scenario measures the
//! tail once the models are resident, not the cold start), and the
//! balancer keeps every model on at least 2 owners (the 16 model slots
//! hold each model twice): a hedge's backup needs a second warm copy. `--load` sets
//! the offered load (default 0.3 of warm capacity); `model_aware_hedged`
//! is `model_aware` with the hedging layer outermost.
//!
//! `overload` runs the default fleet, without its fault, at 1.0, 1.5 and
//! 3.0 of warm capacity, 10% of requests `Critical`, each load after 3 s
//! of uncounted warm-up arrivals at its rate, with model-aware balancing
//! with and without admission (`model_aware_admission`: at most as many
//! requests in flight per backend as it serves at once) beside the
//! baselines; see `overload.rs` for its figures.
//!
//! With `--explicit-load` the servers run in explicit model-control mode
//! (404 until a model is loaded through the KServe v2 repository API) and
//! the `model_aware*` strategies place models themselves
//! (`tower_model_balance::placement`); the baselines, which do not, fail on
//! every model not loaded. The JSON's `max_concurrent_loads` is the most
//! load calls for one model any server had in flight at once.
//!
//! With `--stream` each inference request is a streamed OpenAI chat
//! completion and each strategy also reports its time to first token and
//! per output token; see `stream.rs`.
//!
//! With `--etcd URL [--prefix P]` the `model_aware*` balancers take their
//! servers from etcd (see `etcd.rs`) instead of a list; the figures are
//! those of the list.
//!
//! `prefix` serves one model on every backend with a prefix (KV) cache and
//! one prefill engine per server, under a chat workload whose prompts share
//! long prefixes (Zipf-popular system prompts and documents, one-shot
//! questions and multi-turn sessions), and compares the strategies, KubeAI's
//! `PrefixHash` (`chwbl`) among them, on prefix hit rate and time to first
//! token against an oracle's bound; see `prefix.rs`.

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
mod chwbl;
mod endpoint;
mod etcd;
mod names;
mod overload;
mod prefix;
mod record;
mod report;
mod run;
mod strategies;
mod stream;

use std::sync::Arc;

use tower_model_balance_eval::workload;
use tower_model_balance_sim::{InferenceTimes, ServerConfig};

use args::{Args, Scenario};

#[tokio::main]
async fn main() {
    let args = Args::from_env();
    if args.scenario == Scenario::Prefix {
        prefix::run_all(&args).await;
        return;
    }
    let times = InferenceTimes::new(args.seed, 5, 30).expect("5..=30 ms is valid");
    let slots = match args.scenario {
        Scenario::Default | Scenario::Overload | Scenario::Prefix => 5,
        Scenario::SlowTail => 16,
    };
    let config = ServerConfig::builder()
        .resident_slots(slots)
        .inference(times)
        .explicit_load(args.explicit_load)
        .repository((0..workload::MODELS).map(workload::model_name))
        .build()
        .expect("the scenario's config is valid");
    if args.scenario == Scenario::Overload {
        overload::run_all(&args, &config, &times).await;
        return;
    }
    let rate = if args.stream {
        stream::arrival_rate(args.backends, &config, &times, args.load)
    } else {
        workload::arrival_rate(args.backends, config.concurrency(), &times, args.load)
    };
    let plan = Arc::new(workload::plan(args.requests, rate, args.seed, 0.0));
    let warm_up = (args.scenario == Scenario::SlowTail).then(|| {
        Arc::new(workload::plan(
            run::WARM_UP,
            rate,
            args.seed.wrapping_add(1_000),
            0.0,
        ))
    });
    if !args.json {
        emit!(
            "scenario {} · {} backends · {} requests per strategy · {:.0} req/s ({:.0}% of warm capacity) · seed {}{}",
            args.scenario, args.backends, args.requests, rate, args.load * 100.0, args.seed,
            if args.explicit_load { " · explicit model loading" } else { "" }
        );
        if args.stream {
            emit!(
                "streamed chat completions · {} tokens each · {} ms per token after the first",
                stream::TOKENS,
                config.decode_time().as_millis()
            );
        }
    }
    let mut rows = Vec::new();
    for (name, label) in args::labels(&args.strategies) {
        let figures = match run::run(
            (name, &label),
            &args,
            &config,
            plan.clone(),
            warm_up.clone(),
        )
        .await
        {
            Ok(run) => run.figures,
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
        if args.stream {
            report::print_stream_table(&rows);
        }
        if let Some(line) = report::hedging_line(&rows, args.scenario, args.load) {
            emit!("{line}");
        }
        for line in report::repeat_lines(&rows) {
            emit!("{line}");
        }
    }
}
