//! The runs: the strategy comparison (with failures, joins and leaves), the
//! membership changes, and the oracle's bound on warm hits.

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use crate::config::Config;
use crate::config::NAMES;
use crate::metrics::Metrics;
use crate::placement;
use crate::queue::Nanos;
use crate::sim::{self, Change, Plan};
use crate::strategy::Names;
use crate::workload::Workload;

const SECOND: Nanos = 1_000_000_000;
/// The slices of a membership change's window whose p99 is taken.
const SLICE: Nanos = 10 * SECOND;
/// The least virtual time a run warms the fleet up before it measures.
pub const WARM_UP: Nanos = 30 * SECOND;

/// Requests sent before the comparison measures.
pub fn warmup_requests(config: &Config, workload: &Workload) -> usize {
    let by_time = (WARM_UP as f64 / workload.gap_ns).ceil() as usize;
    (config.requests / 10).max(by_time)
}

/// One strategy's figures.
#[derive(Debug, Clone)]
pub struct StrategyRow {
    pub strategy: &'static str,
    pub warm_hit_rate: f64,
    pub cold_loads_per_1k: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// The busiest backend's requests in flight, averaged over the
    /// measurement window, over the mean ([`Metrics::max_mean_load`]).
    pub max_mean_load: f64,
    /// Requests in flight per backend, averaged over the window and the
    /// backends [`StrategyRow::max_mean_load`] is over.
    pub mean_in_flight: f64,
    /// The busiest backend's serving slots in use, averaged over the
    /// window (its utilization), over the mean.
    pub max_mean_busy: f64,
    /// The busiest backend's requests over the mean.
    pub max_mean_requests: f64,
    pub errors: u64,
    /// Latency quantiles for the chart: (quantile, ms).
    pub curve: Vec<(f64, f64)>,
}

/// One membership change's figures.
#[derive(Debug, Clone)]
pub struct ChurnRow {
    pub churn_pct: u32,
    pub staged: bool,
    pub models_moved: usize,
    /// Loads started during the change beyond those started in the same
    /// window of the same run without it (see [`with_control`]).
    pub cold_loads: i64,
    /// Loads started during the change.
    pub during: u64,
    /// The change's window, in seconds of the run.
    pub range: (usize, usize),
    pub peak_cold_loads_per_s: u32,
    /// The worst p99 of the requests arriving in one [`SLICE`] of the
    /// change (its first 10 s, all at once; any step's, staged).
    pub p99_ms: f64,
    /// p99 over the whole window.
    pub window_p99_ms: f64,
    /// Loads started in the same window without the change.
    pub unchanged: u64,
    /// Loads per second from 10 s before the change to its end, for the chart.
    pub timeline: Vec<u32>,
}

/// The comparison's plan: a warm-up (a tenth of the requests, and at
/// least [`WARM_UP`] of virtual time: the owners that popular models add
/// load them first), then `requests` are measured; 1% of the backends fail for the middle third
/// of the run, and 0.5% leave while as many join halfway.
pub fn comparison_plan(config: &Config, workload: &Workload) -> (Plan, Vec<usize>) {
    let n = config.backends;
    let warmup = warmup_requests(config, workload);
    let total = warmup + config.requests;
    let span = workload.span(total);
    let fails = (n / 100).max(1);
    let moves = (n / 200).max(1);
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.shuffle(&mut SmallRng::seed_from_u64(config.seed ^ 0x6661_696c));
    let failing = order[..fails].to_vec();
    let leaving = order[fails..fails + moves].to_vec();
    let joining: Vec<u32> = (n as u32..(n + moves) as u32).collect();
    let steady = order[fails + moves..].iter().map(|&b| b as usize).collect();
    let plan = Plan {
        requests: total,
        measure: (workload.span(warmup), Nanos::MAX),
        changes: vec![
            (span / 3, Change::Fail(failing.clone())),
            (span / 2, Change::Leave(leaving)),
            (span / 2, Change::Join(joining)),
            (2 * span / 3, Change::Recover(failing)),
        ],
        initial: n,
        total: n + moves,
        slice: None,
    };
    (plan, steady)
}

/// Runs one strategy through the comparison.
pub fn compare(config: &Config, workload: &Workload, names: &Names, name: &str) -> StrategyRow {
    let (plan, steady) = comparison_plan(config, workload);
    let mut metrics = sim::block_on(sim::run(config, workload, names, &plan, name, true));
    let strategy = NAMES.iter().find(|n| **n == name).copied().unwrap_or("?");
    row(strategy, &mut metrics, steady)
}

fn row(strategy: &'static str, metrics: &mut Metrics, steady: Vec<usize>) -> StrategyRow {
    let curve = [0.5, 0.75, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999]
        .iter()
        .map(|&q| (q, metrics.quantile_ms(q)))
        .collect();
    StrategyRow {
        strategy,
        warm_hit_rate: metrics.warm_hit_rate(),
        cold_loads_per_1k: metrics.cold_loads_per_1k(),
        p50_ms: metrics.quantile_ms(0.5),
        p99_ms: metrics.quantile_ms(0.99),
        max_mean_load: metrics.max_mean_load(&steady),
        mean_in_flight: metrics.mean_in_flight(&steady),
        max_mean_busy: metrics.max_mean_busy(&steady),
        max_mean_requests: metrics.max_mean_requests(&steady),
        errors: metrics.errors,
        curve,
    }
}

/// Staging steps a join of `share` of the ring takes at `step` per step:
/// each step grows the ring, and the next budget, by `step`.
fn staging_steps(share: f64, step: f64) -> u32 {
    if step >= 1.0 || share <= step {
        return 1;
    }
    ((1.0 + share).ln() / (1.0 + step).ln()).ceil() as u32
}

/// Backends joining when `pct`% join `config.backends`.
fn joins(config: &Config, pct: u32) -> usize {
    ((config.backends as u64 * u64::from(pct)).div_ceil(100) as usize).max(1)
}

/// Staging steps `pct`% of the backends joining at once take.
pub fn churn_steps(config: &Config, pct: u32) -> u32 {
    let share = joins(config, pct) as f64 / config.backends as f64;
    staging_steps(share, config.staging_step)
}

/// `pct`% of the backends join at once, with the model-aware balancer,
/// after [`WARM_UP`]; measured until 10 s after the last staging step
/// (the same window staged or not): models whose first owner moves, loads
/// started (less the control's: [`with_control`]), the most loads started
/// in one second, and the worst p99 over the window's 10 s slices.
pub fn churn(
    config: &Config,
    workload: &Workload,
    names: &Names,
    pct: u32,
    staged: bool,
) -> ChurnRow {
    let n = config.backends;
    let joins = joins(config, pct);
    let at = WARM_UP;
    let window = churn_window(config, pct);
    let requests = ((at + window) as f64 / workload.gap_ns) as usize;
    let plan = Plan {
        requests,
        measure: (at, at + window),
        changes: vec![(at, Change::Join((n as u32..(n + joins) as u32).collect()))],
        initial: n,
        total: n + joins,
        slice: Some(SLICE),
    };
    let mut metrics = sim::block_on(sim::run(
        config,
        workload,
        names,
        &plan,
        "model_aware",
        staged,
    ));
    let (from, to) = ((at / SECOND) as usize, ((at + window) / SECOND) as usize);
    let during = loads_in(&metrics.cold_per_s, from, to);
    let timeline = metrics
        .cold_per_s
        .get(from.saturating_sub(10)..to.min(metrics.cold_per_s.len()))
        .unwrap_or(&[])
        .to_vec();
    ChurnRow {
        churn_pct: pct,
        staged,
        models_moved: placement::models_moved(config, names, n, joins),
        cold_loads: during as i64,
        during,
        range: (from, to),
        peak_cold_loads_per_s: metrics.peak_cold_per_s(from, to),
        p99_ms: metrics.worst_slice_quantile_ms(0.99),
        window_p99_ms: metrics.quantile_ms(0.99),
        unchanged: 0,
        timeline,
    }
}

/// The window a join of `pct`% is measured over: until 10 s after its
/// last staging step (at the run's staging step).
pub fn churn_window(config: &Config, pct: u32) -> Nanos {
    let cooldown = (config.staging_cooldown * 1e9) as Nanos;
    Nanos::from(churn_steps(config, pct).saturating_sub(1)) * cooldown + 10 * SECOND
}

/// The control of the membership changes: the same run with no change,
/// for `window` after [`WARM_UP`]; loads started in each second.
pub fn control(config: &Config, workload: &Workload, names: &Names, window: Nanos) -> Vec<u32> {
    let n = config.backends;
    let plan = Plan {
        requests: ((WARM_UP + window) as f64 / workload.gap_ns) as usize,
        measure: (WARM_UP, WARM_UP + window),
        changes: Vec::new(),
        initial: n,
        total: n,
        slice: None,
    };
    let metrics = sim::block_on(sim::run(
        config,
        workload,
        names,
        &plan,
        "model_aware",
        true,
    ));
    metrics.cold_per_s
}

/// Sets the loads a change caused: those started in its window, less
/// those the control started in the same seconds.
pub fn with_control(mut row: ChurnRow, control: &[u32]) -> ChurnRow {
    row.unchanged = loads_in(control, row.range.0, row.range.1);
    row.cold_loads = row.during as i64 - row.unchanged as i64;
    row
}

fn loads_in(per_s: &[u32], from: usize, to: usize) -> u64 {
    let to = to.min(per_s.len());
    per_s
        .get(from.min(to)..to)
        .unwrap_or(&[])
        .iter()
        .map(|&c| u64::from(c))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_steps_follow_the_ring_growth() {
        assert_eq!(
            staging_steps(0.1, 0.1),
            1,
            "10% of the ring lands in one step"
        );
        assert_eq!(staging_steps(0.1, 0.02), 5);
        assert_eq!(staging_steps(0.01, 0.02), 1);
        assert_eq!(staging_steps(0.1, 1.0), 1);
    }
}
