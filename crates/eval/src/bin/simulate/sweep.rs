//! `--sweep`: the model-aware balancer's settings, one at a time around
//! the run's values — vnodes, the most owners `k`, the bounded-load factor
//! `c` (each over the strategy comparison) and the staging step (over a
//! 10% join) — to choose defaults from.

use crate::config::Config;
use crate::scenario::{self, ChurnRow, StrategyRow};
use crate::strategy::Names;
use crate::workload::Workload;

const VNODES: [u32; 4] = [50, 100, 150, 300];
const OWNERS: [usize; 4] = [16, 64, 256, 1024];
const LOAD_FACTORS: [f64; 4] = [1.1, 1.25, 1.5, 2.0];
const STAGING_STEPS: [f64; 4] = [0.01, 0.02, 0.05, 0.1];

enum Job {
    Compare(&'static str, f64, Config),
    Staging(f64, Config),
    Control(Config),
}

enum Done {
    Compare(&'static str, f64, StrategyRow, f64),
    Staging(f64, ChurnRow),
    Control(Vec<u32>),
}

pub fn run(config: &Config, workload: &Workload) {
    let mut jobs = Vec::new();
    for v in VNODES {
        let c = Config {
            vnodes: v,
            ..config.clone()
        };
        jobs.push(Job::Compare("vnodes", f64::from(v), c));
    }
    for k in OWNERS {
        let c = Config {
            owners: k,
            ..config.clone()
        };
        jobs.push(Job::Compare("owners", k as f64, c));
    }
    for f in LOAD_FACTORS {
        let c = Config {
            load_factor: f,
            ..config.clone()
        };
        jobs.push(Job::Compare("load_factor", f, c));
    }
    for s in STAGING_STEPS {
        let c = Config {
            staging_step: s,
            ..config.clone()
        };
        jobs.push(Job::Staging(s, c));
    }
    // The control of the staging runs, as long as the finest step's.
    let finest = Config {
        staging_step: STAGING_STEPS[0],
        ..config.clone()
    };
    jobs.insert(0, Job::Control(finest));
    let names = Names::new(config.backends * 2, config.models);
    let results = crate::threads::run_jobs(&jobs, |job| match job {
        Job::Compare(what, value, c) => {
            let row = scenario::compare(c, workload, &names, "model_aware");
            let ring = crate::placement::ring_balance(c, &names);
            Done::Compare(what, *value, row, ring)
        }
        Job::Staging(step, c) => {
            Done::Staging(*step, scenario::churn(c, workload, &names, 10, true))
        }
        Job::Control(c) => {
            let window = scenario::churn_window(c, 10);
            Done::Control(scenario::control(c, workload, &names, window))
        }
    });
    let control = results
        .iter()
        .find_map(|d| match d {
            Done::Control(per_s) => Some(per_s.clone()),
            _ => None,
        })
        .unwrap_or_default();
    if !config.json {
        println!(
            "scenario {}: sweep of the model-aware balancer, one setting at a time (others: vnodes {}, k {}, c {}, staging step {})",
            config.scenario.name(),
            config.vnodes, config.owners, config.load_factor, config.staging_step
        );
        println!(
            "{:<12} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>10}",
            "setting",
            "value",
            "warm_hit",
            "cold/1k",
            "p50_ms",
            "p99_ms",
            "max/mean",
            "errors",
            "ring max/mean"
        );
    }
    let scenario = config.scenario.name();
    let mut staging_header = false;
    for done in results {
        let done = match done {
            Done::Staging(step, row) => Done::Staging(step, scenario::with_control(row, &control)),
            other => other,
        };
        match done {
            Done::Control(_) => {}
            Done::Compare(what, value, r, ring) if config.json => println!(
                "{{\"scenario\":\"{scenario}\",\"sweep\":\"{what}\",\"value\":{value},\"warm_hit_rate\":{:.4},\"cold_loads_per_1k\":{:.2},\"p50_ms\":{:.2},\"p99_ms\":{:.2},\"max_mean_load\":{:.3},\"errors\":{},\"ring_max_mean\":{ring:.3}}}",
                r.warm_hit_rate, r.cold_loads_per_1k, r.p50_ms, r.p99_ms, r.max_mean_load, r.errors
            ),
            Done::Compare(what, value, r, ring) => println!(
                "{:<12} {:>7} {:>9.3} {:>9.1} {:>9.1} {:>9.1} {:>9.2} {:>8} {:>10.2}",
                what, value, r.warm_hit_rate, r.cold_loads_per_1k, r.p50_ms, r.p99_ms, r.max_mean_load, r.errors, ring
            ),
            Done::Staging(step, r) if config.json => println!(
                "{{\"scenario\":\"{scenario}\",\"sweep\":\"staging_step\",\"value\":{step},\"churn_pct\":10,\"models_moved\":{},\"cold_loads\":{},\"peak_cold_loads_per_s\":{},\"p99_ms\":{:.2}}}",
                r.models_moved, r.cold_loads, r.peak_cold_loads_per_s, r.p99_ms
            ),
            Done::Staging(step, r) => {
                if !staging_header {
                    staging_header = true;
                    println!(
                        "\n10% of backends joining at once, staged (cooldown {} s):\n{:<12} {:>7} {:>11} {:>12} {:>9}",
                        config.staging_cooldown, "setting", "value", "cold_loads", "peak_cold/s", "p99_ms"
                    );
                }
                println!(
                    "{:<12} {:>7} {:>11} {:>12} {:>9.1}",
                    "staging_step", step, r.cold_loads, r.peak_cold_loads_per_s, r.p99_ms
                );
            }
        }
    }
}
