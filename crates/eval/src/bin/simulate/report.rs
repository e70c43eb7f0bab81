//! The table on stdout, and `--json`'s one object per line.

use crate::batching;
use crate::config::Config;
use crate::scenario::{ChurnRow, StrategyRow};
use crate::workload::Workload;

/// The scenario's name and its fleet, workload and seed.
pub fn header(config: &Config, workload: &Workload) -> String {
    let slots = config.serving_slots as u32;
    let s = config.batch_slowdown;
    let batching = match s > 0.0 {
        false => String::from("no batching"),
        true => format!(
            "batching: each request in service slows the others by {:.0}% of their time alone \
             (a full batch: {:.2}× slower, {:.1}× the throughput of one at a time)",
            s * 100.0,
            batching::slowdown_factor(slots.saturating_sub(1), s),
            batching::throughput_gain(slots, s),
        ),
    };
    format!(
        "scenario {}\nfleet: {} backends × {} serving slots, {} model slots each; {batching}; \
         {} models, Zipf({}); {:.0}% updates; {:.0} req/s ({:.0}% of warm capacity{}); seed {}",
        config.scenario.name(),
        config.backends,
        config.serving_slots,
        config.model_slots,
        config.models,
        config.zipf,
        config.update_share * 100.0,
        workload.rate,
        config.utilization * 100.0,
        if config.batch_slowdown > 0.0 {
            " at a full batch"
        } else {
            ""
        },
        config.seed,
    )
}

pub fn strategy_table(
    config: &Config,
    workload: &Workload,
    rows: &[StrategyRow],
    oracle: f64,
) -> String {
    let mut out = format!(
        "\n{} requests per strategy (after {} of warm-up); 1% of backends fail for the middle \
         third, 0.5% leave and 0.5% join halfway\n",
        config.requests,
        crate::scenario::warmup_requests(config, workload),
    );
    out += &format!(
        "{:<16} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>9}\n",
        "strategy",
        "warm_hit",
        "cold/1k",
        "p50_ms",
        "p99_ms",
        "max/mean",
        "max/mean",
        "max/mean",
        "errors",
        "in-flight"
    );
    out += &format!(
        "{:<16} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>9}\n",
        "", "", "", "", "", "in-flight", "busy", "requests", "", "/backend"
    );
    for r in rows {
        out += &format!(
            "{:<16} {:>9.3} {:>9.1} {:>9.1} {:>9.1} {:>9.2} {:>9.2} {:>9.2} {:>8} {:>9.1}\n",
            r.strategy,
            r.warm_hit_rate,
            r.cold_loads_per_1k,
            r.p50_ms,
            r.p99_ms,
            r.max_mean_load,
            r.max_mean_busy,
            r.max_mean_requests,
            r.errors,
            r.mean_in_flight
        );
    }
    out += &format!(
        "{:<16} {:>9.3}   (upper bound: placement knowing popularity)\n",
        "oracle", oracle
    );
    out
}

pub fn churn_table(config: &Config, rows: &[ChurnRow]) -> String {
    let mut out = format!(
        "\nmembership change: backends joining at once, model_aware; staged = {}% of the ring \
         per step, {} s apart; unstaged = all at once; cold_loads: those started in the change's window \
         less those the same run started without the change; p99_ms: the worst 10 s slice\n",
        config.staging_step * 100.0,
        config.staging_cooldown
    );
    out += &format!(
        "{:>6} {:>7} {:>13} {:>11} {:>12} {:>9} {:>13} {:>16}\n",
        "churn",
        "staged",
        "models_moved",
        "cold_loads",
        "peak_cold/s",
        "p99_ms",
        "window p99_ms",
        "loads w/o change"
    );
    for r in rows {
        out += &format!(
            "{:>5}% {:>7} {:>13} {:>11} {:>12} {:>9.1} {:>13.1} {:>16}\n",
            r.churn_pct,
            r.staged,
            r.models_moved,
            r.cold_loads,
            r.peak_cold_loads_per_s,
            r.p99_ms,
            r.window_p99_ms,
            r.unchanged
        );
    }
    out
}

/// One strategy's line for `--json`, `scenario` its scenario's name.
pub fn strategy_json(scenario: &str, r: &StrategyRow) -> String {
    format!(
        "{{\"scenario\":\"{scenario}\",\"strategy\":\"{}\",\"warm_hit_rate\":{:.4},\"cold_loads_per_1k\":{:.2},\"p50_ms\":{:.2},\"p99_ms\":{:.2},\"max_mean_load\":{:.3}}}",
        r.strategy, r.warm_hit_rate, r.cold_loads_per_1k, r.p50_ms, r.p99_ms, r.max_mean_load
    )
}

/// One membership change's line for `--json`, `scenario` its scenario's
/// name.
pub fn churn_json(scenario: &str, r: &ChurnRow) -> String {
    format!(
        "{{\"scenario\":\"{scenario}\",\"churn_pct\":{},\"staged\":{},\"models_moved\":{},\"cold_loads\":{},\"peak_cold_loads_per_s\":{},\"p99_ms\":{:.2}}}",
        r.churn_pct, r.staged, r.models_moved, r.cold_loads, r.peak_cold_loads_per_s, r.p99_ms
    )
}
