//! Figures of one strategy's run, as DESIGN.md names them.

use hdrhistogram::Histogram;
use serde::Serialize;

use tower_model_balance::hedge::HedgeStats;

use crate::args::Scenario;
use crate::record::Record;
use crate::stream::StreamFigures;

#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    pub strategy: String,
    pub requests: u64,
    pub ok: u64,
    pub errors: u64,
    pub warm_hit_rate: f64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    /// Answers that took more than ten times the run's median (`p50_ms`):
    /// in `slow-tail`, the slow server's 10× answers that no backup beat.
    /// The guard's measure of hedging, where the p999 of 10,000 requests
    /// stands on ten answers and flips between the slow and the hedged
    /// time as a few more or fewer of them are left.
    pub slow_answers: u64,
    /// `None` (JSON `null`) when no request was served warm.
    pub warm_p99_ms: Option<f64>,
    pub cold_loads: u64,
    pub breaker_trips: u64,
    /// Trips of the backends the scenario does not fault (`model_aware*`):
    /// 0 unless a healthy server was shut out.
    pub healthy_breaker_trips: u64,
    pub max_mean_load: f64,
    /// Backup requests sent (`model_aware_hedged`; 0 for the others).
    pub hedges: u64,
    /// Requests answered by their backup.
    pub hedges_won: u64,
    /// The most load calls for one model any server had in flight at once
    /// (explicit mode: 1 when placement single-flights; 0 in auto mode).
    pub max_concurrent_loads: u64,
    /// TTFT and TPOT (`--stream` only; flattened into the JSON object).
    #[serde(flatten)]
    pub stream: Option<StreamFigures>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid bounds")
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

pub fn figures(
    strategy: &str,
    records: &[Record],
    cold_loads: u64,
    breaker_trips: u64,
    loads: &[u64],
    (hedges, hedges_won): (u64, u64),
) -> Figures {
    let mut all = histogram();
    let mut warm = histogram();
    let mut inference = 0u64;
    let mut warm_hits = 0u64;
    for r in records {
        let us = (r.latency.as_micros() as u64).clamp(1, 600_000_000);
        all.saturating_record(us);
        if r.inference {
            inference += 1;
            if r.ok && !r.cold {
                warm_hits += 1;
                warm.saturating_record(us);
            }
        }
    }
    let ok = records.iter().filter(|r| r.ok).count() as u64;
    let slow_bar = all.value_at_quantile(0.50).saturating_mul(10);
    let slow_answers = records
        .iter()
        .filter(|r| r.latency.as_micros() as u64 > slow_bar)
        .count() as u64;
    let mean_load = loads.iter().sum::<u64>() as f64 / loads.len().max(1) as f64;
    let max_load = loads.iter().copied().max().unwrap_or(0) as f64;
    Figures {
        strategy: strategy.to_owned(),
        requests: records.len() as u64,
        ok,
        errors: records.len() as u64 - ok,
        warm_hit_rate: warm_hits as f64 / inference.max(1) as f64,
        mean_ms: all.mean() / 1000.0,
        p50_ms: ms(all.value_at_quantile(0.50)),
        p95_ms: ms(all.value_at_quantile(0.95)),
        p99_ms: ms(all.value_at_quantile(0.99)),
        p999_ms: ms(all.value_at_quantile(0.999)),
        slow_answers,
        warm_p99_ms: (!warm.is_empty()).then(|| ms(warm.value_at_quantile(0.99))),
        cold_loads,
        breaker_trips,
        healthy_breaker_trips: 0,
        max_mean_load: if mean_load > 0.0 {
            max_load / mean_load
        } else {
            0.0
        },
        hedges,
        hedges_won,
        max_concurrent_loads: 0,
        stream: None,
    }
}

/// The hedging figures the project's targets name, when both
/// `model_aware` and `model_aware_hedged` ran: the hedged p999 over the
/// unhedged (in `slow-tail` below `--load 1.2` the target is ≤ 0.6: the
/// slow answers are about 1% of requests, so they sit at p999, not p99)
/// and the extra
/// requests hedging sent (≤ 6%; ≤ 1% at `--load 1.2` and above).
pub fn hedging_line(rows: &[Figures], scenario: Scenario, load: f64) -> Option<String> {
    let find = |name: &str| rows.iter().find(|f| f.strategy == name);
    let (plain, hedged) = (find("model_aware")?, find("model_aware_hedged")?);
    let ratio = hedged.p999_ms / plain.p999_ms;
    let extra = hedged.hedges as f64 / hedged.requests.max(1) as f64;
    let extra_target = if load >= 1.2 { 0.01 } else { 0.06 };
    // Overloaded, the gate holds hedges back: only the extra share has a
    // target then.
    let tail = match scenario {
        // The p999 of fewer requests is a handful of them: no verdict.
        Scenario::SlowTail if load < 1.2 && plain.requests < MIN_FOR_P999 => format!(
            "p999 hedged ÷ unhedged {ratio:.2} (too few requests for the target: {MIN_FOR_P999} or more)"
        ),
        Scenario::SlowTail if load < 1.2 => format!(
            "p999 hedged ÷ unhedged {ratio:.2} (target ≤ 0.6: {})",
            verdict(ratio <= 0.6)
        ),
        _ => format!("p999 hedged ÷ unhedged {ratio:.2}"),
    };
    // No backup sent: the two runs differ by their noise, not the hedge.
    let noise = if hedged.hedges == 0 {
        ", with no backup sent (run-to-run noise)"
    } else {
        ""
    };
    Some(format!(
        "hedging: {tail}{noise}; extra requests {:.2}% (target ≤ {:.0}%: {})",
        extra * 100.0,
        extra_target * 100.0,
        verdict(extra <= extra_target)
    ))
}

/// For each repeated run (`name#k`), its figures over its strategy's
/// first run: the noise between two runs of one strategy (an A/A pair),
/// the floor under any difference between two strategies.
pub fn repeat_lines(rows: &[Figures]) -> Vec<String> {
    rows.iter()
        .filter_map(|again| {
            let (name, _) = again.strategy.split_once('#')?;
            let first = rows.iter().find(|f| f.strategy == name)?;
            let ttft = match (again.stream, first.stream) {
                (Some(a), Some(f)) => format!(
                    ", TTFT mean {:.2}",
                    a.ttft_mean_ms / f.ttft_mean_ms
                ),
                _ => String::new(),
            };
            Some(format!(
                "A/A {} ÷ {name}: p999 {:.2}, p99 {:.2}, mean {:.2}, cold loads {:.2}, errors {} vs {}{ttft}",
                again.strategy,
                again.p999_ms / first.p999_ms,
                again.p99_ms / first.p99_ms,
                again.mean_ms / first.mean_ms,
                again.cold_loads as f64 / first.cold_loads.max(1) as f64,
                again.errors,
                first.errors,
            ))
        })
        .collect()
}

/// Requests a run needs for its p999 to stand on ten of them.
const MIN_FOR_P999: u64 = 10_000;

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "missed"
    }
}

pub fn print_table(rows: &[Figures]) {
    emit!(
        "{:<20} {:>8} {:>8} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>11} {:>6} {:>6} {:>8} {:>6} {:>6}",
        "strategy",
        "requests",
        "ok",
        "errors",
        "warm_hit",
        "mean_ms",
        "p50_ms",
        "p95_ms",
        "p99_ms",
        "p999_ms",
        "warm_p99_ms",
        "cold",
        "trips",
        "max/mean",
        "hedges",
        "won"
    );
    for f in rows {
        let warm_p99 = f.warm_p99_ms.map_or("-".to_owned(), |v| format!("{v:.1}"));
        emit!(
            "{:<20} {:>8} {:>8} {:>7} {:>9.3} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>11} {:>6} {:>6} {:>8.2} {:>6} {:>6}",
            f.strategy, f.requests, f.ok, f.errors, f.warm_hit_rate, f.mean_ms, f.p50_ms, f.p95_ms,
            f.p99_ms, f.p999_ms, warm_p99, f.cold_loads, f.breaker_trips, f.max_mean_load, f.hedges,
            f.hedges_won
        );
    }
}

/// The hedge's counters since `before`.
pub fn hedge_delta(mut s: HedgeStats, before: &HedgeStats) -> HedgeStats {
    s.requests -= before.requests;
    s.hedges -= before.hedges;
    s.hedges_won -= before.hedges_won;
    s.hedges_after_failure -= before.hedges_after_failure;
    s.suppressed_by_budget -= before.suppressed_by_budget;
    s.suppressed_by_load -= before.suppressed_by_load;
    s.suppressed_by_no_alternative -= before.suppressed_by_no_alternative;
    s.ended_before_delay -= before.ended_before_delay;
    s.warming_up -= before.warming_up;
    s.updates -= before.updates;
    s.uncopyable -= before.uncopyable;
    s.disabled -= before.disabled;
    s.backup_unready -= before.backup_unready;
    s
}

/// Every request the hedge saw, hedged or not and why.
pub fn hedge_line(s: &HedgeStats) -> String {
    format!(
        "{} requests: {} hedged ({} after a fast failure, {} won); not hedged: {} answered before the delay, {} warming up, {} updates, suppressed {} by budget, {} by load, {} by no alternative",
        s.requests,
        s.hedges,
        s.hedges_after_failure,
        s.hedges_won,
        s.ended_before_delay,
        s.warming_up,
        s.updates,
        s.suppressed_by_budget,
        s.suppressed_by_load,
        s.suppressed_by_no_alternative
    )
}

/// The streaming table, and which strategy has the lowest TTFT p99.
pub fn print_stream_table(rows: &[Figures]) {
    emit!(
        "{:<20} {:>8} {:>10} {:>9} {:>9} {:>10} {:>9} {:>9}",
        "streams",
        "ok",
        "ttft_mean",
        "ttft_p50",
        "ttft_p99",
        "tpot_mean",
        "tpot_p50",
        "tpot_p99"
    );
    for f in rows {
        let Some(s) = f.stream else { continue };
        emit!(
            "{:<20} {:>8} {:>10.1} {:>9.1} {:>9.1} {:>10.2} {:>9.2} {:>9.2}",
            f.strategy,
            s.streams_ok,
            s.ttft_mean_ms,
            s.ttft_p50_ms,
            s.ttft_p99_ms,
            s.tpot_mean_ms,
            s.tpot_p50_ms,
            s.tpot_p99_ms
        );
    }
    let best = rows
        .iter()
        .filter_map(|f| Some((f.strategy.as_str(), f.stream?)))
        .filter(|(_, s)| s.streams_ok > 0)
        .min_by(|a, b| a.1.ttft_p99_ms.total_cmp(&b.1.ttft_p99_ms));
    if let Some((name, s)) = best {
        emit!(
            "lowest TTFT p99: {name} ({:.1} ms; model-aware lowest: {})",
            s.ttft_p99_ms,
            if name.starts_with("model_aware") {
                "yes"
            } else {
                "no"
            }
        );
    }
}
