//! The `overload` scenario: the default fleet, without its fault, at 1.0,
//! 1.5 and 3.0 of warm capacity, 10% of requests `Critical`, each strategy
//! on fresh servers per load.
//!
//! Per strategy and load: goodput (successful requests over the span of
//! the arrivals, a second each; a request past its deadline is not a
//! success), p50 and p99 of the successful requests, the share of
//! `Critical` requests served, the requests shed by urgency and the
//! slowest of them shed at once, the longest queue (the balancer's, and
//! the longest any server had), and the process's memory.
//!
//! The deadline is 1 s here (5 s in the other scenarios): a baseline at
//! 3.0 keeps every request it cannot serve in flight until its deadline,
//! and with both ends of every connection in this one process, 6 000
//! requests a second held for 5 s would need 60 000 sockets, three times
//! the machine's open-file limit. 1 s is still 30 times the slowest
//! model's service time.

use std::sync::Arc;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;
use tower_model_balance_eval::workload;
use tower_model_balance_sim::{InferenceTimes, ServerConfig};

use crate::args::Args;
use crate::record::Record;
use crate::run::{self, Run};

/// The offered loads, as fractions of the fleet's warm capacity.
pub const LOADS: [f64; 3] = [1.0, 1.5, 3.0];
/// The share of requests sent `Critical`.
pub const CRITICAL_SHARE: f64 = 0.1;
/// Uncounted arrivals before each measured run, at the run's rate: the
/// models resident on their owners (each server loads one at a time, 300
/// ms each), so that each load measures overload, not the cold start.
const WARM_UP: Duration = Duration::from_secs(3);

/// One strategy at one load.
#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    pub scenario: &'static str,
    pub strategy: String,
    pub load: f64,
    pub seed: u64,
    pub requests: u64,
    pub ok: u64,
    /// Successful requests (within the deadline) over the span of the
    /// arrivals, per second.
    pub goodput_rps: f64,
    /// Of the successful requests.
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// `Critical` requests served, over those sent.
    pub critical_ok_rate: f64,
    pub shed_normal: u64,
    pub shed_critical: u64,
    /// Requests shed after waiting for room (their wait ran out).
    pub shed_after_wait: u64,
    /// The slowest request shed at once (0 when none was), and the 99.9th
    /// percentile: wall-clock time around a `call` that returns at once,
    /// so an outlier is the thread descheduled meanwhile.
    pub shed_max_ms: f64,
    pub shed_p999_ms: f64,
    /// The most requests waiting for room in the balancer at once.
    pub balancer_queue_peak: u64,
    /// The most requests one server had waiting for a serving slot.
    pub server_queue_peak: u64,
    /// The process's resident memory after the run, its peak during it,
    /// and that peak over the memory at the run's start: what the run
    /// itself took (every strategy runs in this one process, so the
    /// allocator keeps what earlier runs took).
    pub rss_mb: f64,
    pub peak_rss_mb: f64,
    pub rss_growth_mb: f64,
    pub warm_hit_rate: f64,
}

/// Runs every strategy at every load, printing a table (or JSON lines).
pub async fn run_all(args: &Args, config: &ServerConfig, times: &InferenceTimes) {
    if !args.json {
        emit!(
            "scenario overload · {} backends · {} requests at 1.0 (as many seconds at each load) · {:.0}% Critical · deadline {} ms · seed {}",
            args.backends, args.requests, CRITICAL_SHARE * 100.0, run::OVERLOAD_DEADLINE.as_millis(), args.seed
        );
    }
    let mut rows = Vec::new();
    for &load in &LOADS {
        let rate = workload::arrival_rate(args.backends, config.concurrency(), times, load);
        let requests = ((args.requests as f64 * load) as usize).max(10);
        let plan = Arc::new(workload::plan(requests, rate, args.seed, CRITICAL_SHARE));
        let warm_up_requests = (rate * WARM_UP.as_secs_f64()) as usize;
        let seed = args.seed.wrapping_add(1_000);
        let warm_up = workload::plan(warm_up_requests, rate, seed, CRITICAL_SHARE);
        let warm_up = Some(Arc::new(warm_up));
        for &name in &args.strategies {
            reset_peak_rss();
            let start_mb = memory_mb().0;
            let run =
                match run::run((name, name), args, config, plan.clone(), warm_up.clone()).await {
                    Ok(run) => run,
                    Err(error) => {
                        eprintln!("error: {name}: {error}");
                        std::process::exit(1);
                    }
                };
            let span = plan.last().map_or(Duration::ZERO, |p| p.at);
            let mut row = figures(name, load, args.seed, span, &run);
            row.rss_growth_mb = (row.peak_rss_mb - start_mb).max(0.0);
            if args.json {
                emit!(
                    "{}",
                    serde_json::to_string(&row).expect("figures serialize")
                );
            }
            rows.push(row);
        }
    }
    if !args.json {
        print_table(&rows);
        for line in verdicts(&rows) {
            emit!("{line}");
        }
    }
}

fn figures(strategy: &str, load: f64, seed: u64, span: Duration, run: &Run) -> Figures {
    let records = &run.records;
    let mut ok = Histogram::<u64>::new_with_bounds(1, 600_000_000, 3).expect("valid bounds");
    for r in records.iter().filter(|r| r.ok) {
        ok.saturating_record((r.latency.as_micros() as u64).clamp(1, 600_000_000));
    }
    let count = |f: &dyn Fn(&Record) -> bool| records.iter().filter(|r| f(r)).count() as u64;
    let critical = count(&|r| r.critical);
    let critical_ok = count(&|r| r.critical && r.ok);
    let mut at_once: Vec<Duration> = records
        .iter()
        .filter(|r| r.shed == Some(Duration::ZERO))
        .map(|r| r.latency)
        .collect();
    at_once.sort_unstable();
    let shed_max = at_once.last().copied().unwrap_or_default();
    let shed_p999 = at_once
        .get((at_once.len() * 999 / 1000).min(at_once.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default();
    let ms = |us: u64| us as f64 / 1000.0;
    let (rss_mb, peak_rss_mb) = memory_mb();
    Figures {
        scenario: "overload",
        strategy: strategy.to_owned(),
        load,
        seed,
        requests: records.len() as u64,
        ok: ok.len(),
        goodput_rps: ok.len() as f64 / span.as_secs_f64().max(1e-9),
        p50_ms: ms(ok.value_at_quantile(0.50)),
        p99_ms: ms(ok.value_at_quantile(0.99)),
        critical_ok_rate: critical_ok as f64 / critical.max(1) as f64,
        shed_normal: count(&|r| r.shed.is_some() && !r.critical),
        shed_critical: count(&|r| r.shed.is_some() && r.critical),
        shed_after_wait: count(&|r| r.shed.is_some_and(|w| !w.is_zero())),
        shed_max_ms: shed_max.as_secs_f64() * 1000.0,
        shed_p999_ms: shed_p999.as_secs_f64() * 1000.0,
        balancer_queue_peak: run.balancer_queue_peak,
        server_queue_peak: run.server_queue_peak,
        rss_mb,
        peak_rss_mb,
        rss_growth_mb: 0.0,
        warm_hit_rate: run.figures.warm_hit_rate,
    }
}

/// The figures the scenario's targets name, for `model_aware_admission`
/// (goodput at 3.0 ≥ 0.9 × at 1.0, p99 at 3.0 ≤ 2 × at 1.0, `Critical`
/// served ≥ 99% at 3.0, every shed within 1 ms), with `model_aware`'s
/// goodput beside it.
fn verdicts(rows: &[Figures]) -> Vec<String> {
    let find = |name: &str, load: f64| rows.iter().find(|f| f.strategy == name && f.load == load);
    let mut lines = Vec::new();
    if let (Some(low), Some(high)) = (
        find("model_aware_admission", 1.0),
        find("model_aware_admission", 3.0),
    ) {
        let goodput = high.goodput_rps / low.goodput_rps.max(1e-9);
        let p99 = high.p99_ms / low.p99_ms.max(1e-9);
        let shed_max = rows
            .iter()
            .filter(|f| f.strategy == "model_aware_admission")
            .map(|f| f.shed_max_ms)
            .fold(0.0, f64::max);
        lines.push(format!(
            "admission: goodput 3.0 ÷ 1.0 {goodput:.2} (target ≥ 0.9: {}); p99 3.0 ÷ 1.0 {p99:.2} (target ≤ 2: {}); Critical served at 3.0 {:.4} (target ≥ 0.99: {}); slowest shed {shed_max:.3} ms (target ≤ 1: {})",
            verdict(goodput >= 0.9),
            verdict(p99 <= 2.0),
            high.critical_ok_rate,
            verdict(high.critical_ok_rate >= 0.99),
            verdict(shed_max <= 1.0),
        ));
    }
    if let (Some(with), Some(without)) =
        (find("model_aware_admission", 3.0), find("model_aware", 3.0))
    {
        lines.push(format!(
            "at 3.0: goodput {:.0} req/s with admission, {:.0} without ({:.2}×); p99 {:.1} ms and {:.1} ms",
            with.goodput_rps,
            without.goodput_rps,
            with.goodput_rps / without.goodput_rps.max(1e-9),
            with.p99_ms,
            without.p99_ms
        ));
    }
    lines
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "missed"
    }
}

fn print_table(rows: &[Figures]) {
    emit!(
        "{:<22} {:>5} {:>8} {:>8} {:>11} {:>8} {:>8} {:>7} {:>9} {:>9} {:>8} {:>8} {:>7} {:>7} {:>7} {:>8}",
        "strategy", "load", "requests", "ok", "goodput/s", "p50_ms", "p99_ms", "crit_ok",
        "shed_norm", "shed_crit", "shed_max", "bal_queue", "srv_q", "rss_mb", "grown_mb", "warm_hit"
    );
    for f in rows {
        emit!(
            "{:<22} {:>5.1} {:>8} {:>8} {:>11.0} {:>8.1} {:>8.1} {:>7.4} {:>9} {:>9} {:>8.3} {:>8} {:>7} {:>7.0} {:>7.0} {:>8.3}",
            f.strategy, f.load, f.requests, f.ok, f.goodput_rps, f.p50_ms, f.p99_ms,
            f.critical_ok_rate, f.shed_normal, f.shed_critical, f.shed_max_ms,
            f.balancer_queue_peak, f.server_queue_peak, f.rss_mb, f.rss_growth_mb, f.warm_hit_rate
        );
    }
}

/// Resets the process's peak resident memory (Linux: `VmHWM` starts
/// again from `VmRSS`); elsewhere a no-op.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The process's resident memory now and its peak, MiB (0 where
/// `/proc/self/status` is not there).
fn memory_mb() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}
