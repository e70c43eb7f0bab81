//! The peer comparison: this crate's gateway (`crates/gateway`) and vLLM Router,
//! each policy of it that applies to a plain fleet, in front of the same
//! simulated OpenAI-compatible servers, under the same open-loop
//! workload, side by side; and, with the search on, the highest rate
//! each sustains (p99 under 1 s, 99.9% ok) on this machine.
//!
//! ```text
//! bash scripts/peer-compare                      # installs vLLM Router, builds, runs
//! bash scripts/peer-compare --smoke              # the short check CI runs
//! cargo run --release --bin peer -- --rates 100,200 --no-max-rate
//! ```
//!
//! Each run starts a fresh fleet (8 servers, nothing resident), starts
//! the router as a subprocess on a free port pointed at them, waits for
//! its health route, sends the fleet job's seeded plan (Poisson
//! arrivals, Zipf(1.1) over 32 models) as chat completions naming the
//! model in the body, and reads the answers' `x-sim-cold-load`, the
//! servers' request counts and the router's CPU time from `/proc`. A
//! `direct` row sends each request straight to a server of an oracle's
//! placement of its model: the baseline of the added latency, and the
//! load generator's own ceiling. See `crates/eval/docs/peer-comparison.md` for what
//! each column means.
//!
//! SIGINT or SIGTERM (`scripts/peer-compare` `exec`s this program, so a
//! signal to the script reaches it) stops the comparison: the router
//! running is killed and reaped, the simulated servers end with the
//! process, and it exits 128 + the signal's number.

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
mod check;
mod cpu;
mod drive;
mod load;
mod prefix;
mod report;
mod router;
mod run;
mod signals;

use std::path::PathBuf;
use std::process::ExitCode;

use tower_model_balance_eval::workload;

use args::Args;
use router::{Kind, Programs};
use run::Setup;

fn main() -> ExitCode {
    ExitCode::from(entry(std::env::args().skip(1)))
}

/// The program on the command line `args`, on a multi-threaded runtime;
/// its exit code: 0 done, 1 a run failed, 2 a bad flag or path, 128 + N
/// stopped by signal N.
fn entry(args: impl IntoIterator<Item = String>) -> u8 {
    let args = match Args::parse_from(std::iter::once("peer".to_owned()).chain(args)) {
        Ok(args) => args,
        Err(error) => {
            // The help on stdout (exit 0), an error and the usage on stderr
            // (exit 2).
            let _ = error.print();
            return u8::try_from(error.exit_code()).unwrap_or(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: no runtime: {e}");
            return 1;
        }
    };
    runtime.block_on(async {
        let programs = match programs(&args) {
            Ok(programs) => programs,
            Err(message) => {
                eprintln!("error: {message}");
                return 2;
            }
        };
        let mut signals = match signals::Signals::install() {
            Ok(signals) => signals,
            Err(message) => {
                eprintln!("error: {message}");
                return 1;
            }
        };
        let outcome = tokio::select! {
            outcome = compare(&args, programs) => Ok(outcome),
            signal = signals.received() => Err(signal),
        };
        // Whatever ended the comparison, no router outlives it.
        router::stop_all().await;
        match outcome {
            Ok(Ok(())) => 0,
            Ok(Err(message)) => {
                eprintln!("error: {message}");
                1
            }
            Err(signal) => {
                eprintln!("stopped by {}: the router killed", signal.name());
                128 + signal.number()
            }
        }
    })
}

/// The row of the load generator's check.
const GENERATOR_CHECK: &str = "direct, generator check";

/// A binary of the gateway's crate: `given` (its flag's value), else the
/// one cargo builds beside it, in the same profile's folder
/// (`target/release/gateway` for `target/release/peer`).
fn built_binary(given: Option<&PathBuf>, bin: &str, flag: &str) -> Result<PathBuf, String> {
    if let Some(path) = given {
        return Ok(path.clone());
    }
    let me = std::env::current_exe().map_err(|e| format!("where am I: {e}"))?;
    let name = format!("{bin}{}", std::env::consts::EXE_SUFFIX);
    let built = me.with_file_name(&name);
    match built.is_file() {
        true => Ok(built),
        false => Err(format!(
            "no {bin} binary at {} (cargo build --release -p tower-model-balance-gateway --bin {bin}, or {flag} PATH)",
            built.display()
        )),
    }
}

/// The programs the comparison starts and its logs folder, each checked
/// before any run.
fn programs(args: &Args) -> Result<Programs, String> {
    let programs = Programs {
        gateway: built_binary(args.gateway.as_ref(), "gateway", "--gateway")?,
        bare_proxy: built_binary(args.bare_proxy.as_ref(), "bare-proxy", "--bare-proxy")?,
        vllm_router: args.vllm_router.clone(),
        logs: args.logs.clone(),
    };
    check::executable(&programs.gateway, "the gateway (--gateway PATH)")?;
    check::executable(&programs.bare_proxy, "the bare proxy (--bare-proxy PATH)")?;
    check::executable(
        &programs.vllm_router,
        "vLLM Router (bash scripts/peer-compare installs it; or --vllm-router PATH)",
    )?;
    check::logs_dir(&programs.logs)?;
    Ok(programs)
}

async fn compare(args: &Args, programs: Programs) -> Result<(), String> {
    let setup = Setup {
        backends: args.backends,
        seed: args.seed,
        programs,
        ticks: cpu::ticks_per_second(),
        workload: args.workload,
    };
    let load = match args.workload {
        load::Workload::Plain => format!(
            "chat completions, Zipf(1.1) over {} models",
            workload::MODELS
        ),
        load::Workload::Prefix => format!(
            "prefix workload: chat completions on {} shared prefixes, sessions, one model, prefix caches",
            tower_model_balance_eval::prefix_workload::PREFIXES
        ),
    };
    let mut kinds = vec![Kind::Direct, Kind::Bare];
    // Steering follows the plain workload's oracle.
    if args.workload == load::Workload::Plain {
        kinds.push(Kind::BareOracle);
    }
    kinds.push(Kind::Gateway);
    kinds.extend(args.policies.iter().cloned().map(Kind::Vllm));
    emit!(
        "{} simulated servers per run (fresh) · {load}, seed {} · {:.1} s per rate{}",
        args.backends,
        args.seed,
        args.duration.as_secs_f64(),
        if args.max_rate {
            format!(
                " · max rate: {:.1} s per step",
                args.search_duration.as_secs_f64()
            )
        } else {
            String::new()
        }
    );
    let mut rows = Vec::new();
    for kind in &kinds {
        for &rate in &args.rates {
            let label = format!("{}-{rate:.0}", kind.to_string().replace(' ', "-"));
            let figures = run::run(&setup, kind, rate, args.duration, &label)
                .await
                .map_err(|e| format!("{kind} at {rate:.0} req/s: {e}"))?;
            eprintln!(
                "{kind} at {rate:.0} req/s: ok {:.2}%, warm {:.2}%",
                figures.ok * 100.0,
                figures.warm_hit * 100.0
            );
            rows.push(figures);
        }
    }
    let mut max_rates = Vec::new();
    if args.max_rate {
        for kind in &kinds {
            eprintln!("searching {kind}'s max rate");
            max_rates.push(run::max_rate(&setup, kind, args.search_duration).await?);
        }
    }
    if args.max_rate {
        // The load generator's own check: the direct row at twice the
        // highest rate any router sustained, its lag column the answer.
        let top = max_rates.iter().filter_map(|m| m.rate).fold(0.0, f64::max);
        let rate = (2.0 * top).max(args.rates.iter().copied().fold(0.0, f64::max));
        eprintln!("the load generator at {rate:.0} req/s, direct");
        let mut figures = run::run(&setup, &Kind::Direct, rate, args.duration, "generator")
            .await
            .map_err(|e| format!("the load generator's check: {e}"))?;
        figures.router = GENERATOR_CHECK.to_owned();
        rows.push(figures);
    }
    report::print_table(&rows, &max_rates);
    sane(&rows)
}

/// Every row sent its plan and had answers; every router's CPU time was
/// read, and is more than zero (a router that answered requests ran).
fn sane(rows: &[report::Figures]) -> Result<(), String> {
    for f in rows {
        let at = format!("{} at {:.0} req/s", f.router, f.rate);
        if f.requests == 0 || f.ok == 0.0 {
            return Err(format!("{at}: no request succeeded"));
        }
        let routed = f.router != "direct" && f.router != GENERATOR_CHECK;
        match f.cpu_per_1k {
            _ if !routed => {}
            None => return Err(format!("{at}: the router's CPU time could not be read")),
            Some(cpu) if cpu <= 0.0 => {
                return Err(format!(
                    "{at}: the router's CPU time read zero, though it answered requests"
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(router: &str, ok: f64, cpu_per_1k: Option<f64>) -> report::Figures {
        report::Figures {
            router: router.to_owned(),
            rate: 100.0,
            requests: 200,
            ok,
            warm_hit: ok,
            mean_ms: 1.0,
            p50_ms: 1.0,
            p99_ms: 1.0,
            max_mean: 1.0,
            outside_p50_ms: Some(0.1),
            cpu_per_1k,
            lag_p99_ms: 1.0,
            prefix_hit: None,
            loads_per_1k: 0.0,
            evictions_per_1k: 0.0,
        }
    }

    #[test]
    fn the_check_wants_answers_and_a_router_that_used_cpu() {
        let fine = [row("direct", 1.0, None), row("gateway", 1.0, Some(0.01))];
        assert_eq!(sane(&fine), Ok(()));
        for (rows, says) in [
            (vec![row("direct", 0.0, None)], "no request succeeded"),
            (vec![row("gateway", 1.0, None)], "could not be read"),
            (
                vec![row("vllm-router cache_aware", 1.0, Some(0.0))],
                "read zero",
            ),
        ] {
            let error = sane(&rows).unwrap_err();
            assert!(error.contains(says), "{error}");
        }
    }
}
