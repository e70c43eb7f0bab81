//! A deterministic discrete-event simulation of a large inference fleet
//! (default 1,000 backends, 10,000 models) in virtual time, with no
//! sockets, comparing routing strategies by the crate's own selection
//! code:
//!
//! * `consistent_hash` — the model's first owner on the crate's [`Ring`];
//! * `bounded_load` — the first backend of the model's ring walk under the
//!   cap `ceil(c × (total in-flight + 1) / n)` (consistent hashing with
//!   bounded load, on the crate's ring walk);
//! * `model_aware` — the full `ModelBalancer` through its pick API: demand
//!   driven owners, residency, bounded load, spill, P2C, per-backend
//!   breakers, health evaluation (its own task, on Tokio's paused clock
//!   kept in step with the simulation) and staged ring changes (through a
//!   `discover::Watch` the simulation publishes backend sets on);
//! * `p2c` — the same balancer with every request sent as an update:
//!   power of two choices on `(in-flight + 1) × latency EWMA / health`
//!   over all eligible backends;
//! * `round_robin`, `random` — the baselines.
//!
//! The fleet: each backend serves 4 requests at once (a FIFO queue
//! beyond) and holds 16 models in GPU memory (LRU). A model is 1, 4, 8 or
//! 16 GB (50 / 30 / 15 / 5% of models); inference takes 100 ms + 10 ms per
//! GB, a cold load 0.5 s + 0.5 s per GB, one load at a time per backend,
//! without holding a serving slot; a request for a model still loading
//! waits for it. Updates (10%) take 10 ms and need no model. Popularity is
//! Zipf (default exponent 1.1, as in the design's scenarios), arrivals are
//! Poisson at 50% of the fleet's warm capacity, and a client gives a
//! request up after 20 s (a failure for the breaker; the backend drops it
//! unserved if it has not started it). The fleet starts warm (each backend
//! holding the most popular of the models it is first ring owner of, and
//! the balancer told so), warms up for at least 30 s of virtual time, then
//! measures a million requests per strategy, during which 1% of the
//! backends fail (answer errors) for the middle third, 0.5% leave and 0.5%
//! join. The membership changes — 1%, 5% and 10% of the backends joining
//! at once, staged or not — run the model-aware balancer alone. An oracle
//! gives the warm-hit upper bound: the most popular models placed first,
//! each on as many backends as its share of the work needs.
//!
//! That is the `default` scenario, at about 2 requests in flight per
//! backend. The default run prints a second, `llm-batch`: LLM servers
//! that batch, at about 21 in flight per backend. Each serves 32 requests
//! at once; a request is a completion, 10× the default's inference time
//! alone (1 s + 100 ms per GB: 1.1 to 2.6 s), and continuous batching
//! slows it by 3% of that time for each request already in service when
//! it starts (fixed then, not re-timed as the batch changes; updates are
//! not slowed): a full batch of 32 makes each request 1.93× slower and
//! the backend 16.6× faster than one request at a time. Arrivals are at
//! 75% of the fleet's warm capacity at a full batch (10,569 requests per
//! second). The rest — models, residency, cold loads, failures, joins,
//! leaves, the membership changes — is the default's, but for the
//! balancer's settings, which are those a user of batching servers would
//! pick: a bounded-load factor `c` of 1.15 (for `bounded_load` too) and
//! each owner of a model sized to carry 0.75 × a backend's mean load
//! from it (`BalanceConfigBuilder::owner_load`; by default `c` ×). At 21
//! in flight per backend the cap `ceil(c × (total + 1) / n)` rounds up by
//! little, so a tight `c` is cheap, and owners with room under the cap
//! for their other models keep a popular model's picks under it: the
//! busiest backend runs at 1.19 × the mean in flight, against 1.42–1.45
//! at the defaults (`crates/eval/docs/simulation.md` has the figures). The completions'
//! length is what keeps loads affordable: at the default's inference
//! times, 16 requests in flight per backend take 105,000 requests per
//! second, and every strategy is bound by one load at a time per backend
//! (model-aware's warm-hit falls to 0.89, its p50 to 2 s, its p99 to the
//! deadline). `--scenario` runs one; the flags apply on top of each
//! scenario's preset.
//!
//! Load balance is the busiest backend's load over the mean, over the
//! backends in the fleet all run long (not those failing, leaving or
//! joining), each load averaged over the measurement window:
//! `max_mean_load` (the JSON key, and the table's `in-flight`) for
//! requests in flight — sent and not answered, queued or waiting for a
//! load included: the quantity the bounded-load cap bounds — `busy` for
//! serving slots in use (utilization, the work done), and `requests` for
//! request counts. The peak rate of cold loads is the most loads started
//! in one second of the change's window.
//!
//! The balancer reads what a real client would give it: each pick's
//! outcome at the virtual time the answer arrives (`Guard::finish_at`:
//! success, or failure for an error or a timeout), discovery's backend
//! sets, and every 5 s a probe of each backend's readiness and resident
//! models (`BalancerHandle::report_probe`). Its breakers' jitter is off:
//! the jitter's seed is random per process by design.
//!
//! ```text
//! cargo run --release --bin simulate            # both scenarios' tables
//! cargo run --release --bin simulate -- --scenario llm-batch
//! cargo run --release --bin simulate -- --json  # one JSON object per line
//! cargo run --release --bin simulate -- --svg sim.svg
//! cargo run --release --bin simulate -- --sweep # vnodes, k, c, staging step
//! ```
//!
//! The same flags and seed give the same output. See `--help` for the
//! flags.
//!
//! [`Ring`]: tower_model_balance::ring::Ring

mod args;
mod batching;
mod chart;
mod config;
mod fleet;
mod lru;
mod metrics;
mod placement;
mod queue;
mod report;
mod scenario;
mod scenarios;
mod sim;
mod strategy;
mod sweep;
mod threads;
mod workload;
mod zipf;

use std::process::ExitCode;

use config::Config;
use scenario::{ChurnRow, StrategyRow};
use strategy::Names;
use workload::Workload;

/// Membership changes simulated: this share of the backends joins at once.
const CHURN_PCTS: [u32; 3] = [1, 5, 10];

fn main() -> ExitCode {
    let configs = Config::from_env();
    // Outside any runtime Tokio's clock is the real one.
    let started = tokio::time::Instant::now();
    for (i, config) in configs.iter().enumerate() {
        if i > 0 && !config.json {
            println!();
        }
        // The chart is the first scenario's.
        if let Err(error) = run_scenario(config, i == 0) {
            eprintln!("simulate: {error}");
            return ExitCode::FAILURE;
        }
    }
    eprintln!("wall time {:.1} s", started.elapsed().as_secs_f64());
    ExitCode::SUCCESS
}

/// Runs one scenario and prints it (the table, or `--json`'s lines);
/// with `chart`, writes `--svg`'s chart of it.
fn run_scenario(config: &Config, chart: bool) -> Result<(), String> {
    let workload = Workload::new(config);
    if config.sweep {
        sweep::run(config, &workload);
        return Ok(());
    }
    let (strategies, churn) = simulate(config, &workload);
    let oracle = placement::oracle_warm_hit(config, &workload);
    let scenario = config.scenario.name();
    if config.json {
        strategies
            .iter()
            .for_each(|r| println!("{}", report::strategy_json(scenario, r)));
        churn
            .iter()
            .for_each(|r| println!("{}", report::churn_json(scenario, r)));
    } else {
        println!("{}", report::header(config, &workload));
        print!(
            "{}",
            report::strategy_table(config, &workload, &strategies, oracle)
        );
        if !churn.is_empty() {
            print!("{}", report::churn_table(config, &churn));
        }
    }
    match &config.svg {
        Some(path) if chart => chart::write(path, &strategies, &churn)
            .map_err(|error| format!("cannot write {}: {error}", path.display())),
        _ => Ok(()),
    }
}

/// One simulation to run.
enum Job {
    Strategy(&'static str),
    Churn(u32, bool),
    /// The membership changes' control run, over this window.
    Control(queue::Nanos),
}

enum Done {
    Strategy(StrategyRow),
    Churn(ChurnRow),
    Control(Vec<u32>),
}

/// Runs every strategy and membership change, on as many threads as the
/// machine has (each job on its own paused runtime: the results do not
/// depend on the threads).
pub fn simulate(config: &Config, workload: &Workload) -> (Vec<StrategyRow>, Vec<ChurnRow>) {
    // The longest first, so that two threads finish together; a join that
    // staging lands in one step is the same run staged or not, run once.
    let mut jobs = Vec::new();
    if config.churn {
        let longest = CHURN_PCTS
            .iter()
            .map(|&p| scenario::churn_window(config, p))
            .max();
        jobs.push(Job::Control(longest.unwrap_or(0)));
        for &pct in CHURN_PCTS.iter().rev() {
            jobs.push(Job::Churn(pct, false));
            if scenario::churn_steps(config, pct) > 1 {
                jobs.push(Job::Churn(pct, true));
            }
        }
    }
    let mut strategies: Vec<&'static str> = config.strategies.clone();
    strategies.sort_by_key(|s| {
        config::NAMES
            .iter()
            .position(|n| n == s)
            .map(std::cmp::Reverse)
    });
    jobs.extend(strategies.iter().map(|s| Job::Strategy(s)));
    // `p2c` takes the longest by far (its breakers keep the balancer in
    // panic mode, which checks the fleet on each pick): first.
    if let Some(i) = jobs.iter().position(|j| matches!(j, Job::Strategy("p2c"))) {
        let p2c = jobs.remove(i);
        jobs.insert(0, p2c);
    }
    let names = Names::new(config.backends * 2, config.models);
    let results = threads::run_jobs(&jobs, |job| match *job {
        Job::Strategy(name) => Done::Strategy(scenario::compare(config, workload, &names, name)),
        Job::Churn(pct, staged) => {
            Done::Churn(scenario::churn(config, workload, &names, pct, staged))
        }
        Job::Control(window) => Done::Control(scenario::control(config, workload, &names, window)),
    });
    let mut strategies = Vec::new();
    let mut churn = Vec::new();
    let mut control = Vec::new();
    for done in results {
        match done {
            Done::Control(per_s) => control = per_s,
            Done::Strategy(row) => strategies.push(row),
            Done::Churn(row) => {
                if scenario::churn_steps(config, row.churn_pct) == 1 {
                    churn.push(ChurnRow {
                        staged: true,
                        ..row.clone()
                    });
                }
                churn.push(row);
            }
        }
    }
    // Table order: the flags' strategies; changes by size, unstaged first.
    strategies.sort_by_key(|r| config.strategies.iter().position(|s| *s == r.strategy));
    churn.sort_by_key(|r| (r.churn_pct, r.staged));
    let churn = churn
        .into_iter()
        .map(|row| scenario::with_control(row, &control))
        .collect();
    (strategies, churn)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Config {
        small_of(Config::default())
    }

    /// A small fleet on `preset`'s servers.
    fn small_of(preset: Config) -> Config {
        Config {
            backends: 20,
            models: 200,
            requests: 3000,
            model_slots: 8,
            staging_cooldown: 1.0,
            ..preset
        }
    }

    fn lines(config: &Config) -> Vec<String> {
        let workload = Workload::new(config);
        let (strategies, churn) = simulate(config, &workload);
        let name = config.scenario.name();
        let mut out: Vec<String> = strategies
            .iter()
            .map(|r| report::strategy_json(name, r))
            .collect();
        out.extend(churn.iter().map(|r| report::churn_json(name, r)));
        out
    }

    #[test]
    fn the_same_seed_gives_the_same_output() {
        let config = small();
        let first = lines(&config);
        assert_eq!(first.len(), 6 + 6, "six strategies, six membership changes");
        assert_eq!(first, lines(&config));
        let other = lines(&Config { seed: 2, ..small() });
        assert_ne!(first, other, "another seed, another run");
    }

    #[test]
    fn the_llm_batch_scenario_runs_the_same_for_the_same_seed() {
        let config = Config {
            churn: false,
            strategies: vec!["bounded_load", "model_aware"],
            ..small_of(config::Config::preset(scenarios::Scenario::LlmBatch))
        };
        let first = lines(&config);
        assert_eq!(first.len(), 2);
        assert!(first
            .iter()
            .all(|l| l.starts_with("{\"scenario\":\"llm-batch\",")));
        assert_eq!(first, lines(&config));
    }

    #[test]
    fn json_lines_have_exactly_the_issue_keys() {
        let config = Config {
            churn: false,
            strategies: vec!["consistent_hash", "model_aware"],
            ..small()
        };
        for line in lines(&config) {
            let value: serde_json::Value = serde_json::from_str(&line).unwrap();
            let mut keys: Vec<&str> = value
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            keys.sort_unstable();
            assert_eq!(
                keys,
                [
                    "cold_loads_per_1k",
                    "max_mean_load",
                    "p50_ms",
                    "p99_ms",
                    "scenario",
                    "strategy",
                    "warm_hit_rate"
                ]
            );
        }
    }
}
