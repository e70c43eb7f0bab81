//! One run's figures, and the table of every run.

use std::time::Duration;

use hdrhistogram::Histogram;

use crate::drive::Record;

/// The figures of one (router, rate) run.
#[derive(Debug, Clone)]
pub struct Figures {
    pub router: String,
    pub rate: f64,
    pub requests: usize,
    /// Share of requests answered 200 whole within the deadline.
    pub ok: f64,
    /// Share of requests answered 200 by a server that held the model.
    pub warm_hit: f64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// The most requests a server received over the mean per server.
    pub max_mean: f64,
    /// p50 over the requests answered 200 of the time they spent outside
    /// the server (see `Record::outside`), ms (`None`: no such answer).
    pub outside_p50_ms: Option<f64>,
    /// The router's CPU time per 1,000 requests, seconds (`None`: direct).
    pub cpu_per_1k: Option<f64>,
    /// p99 of how late the load generator sent a request, ms.
    pub lag_p99_ms: f64,
    /// The servers' prefix-cache hit rate (`None`: no prefix cache).
    pub prefix_hit: Option<f64>,
    /// Model loads the servers started, per 1,000 requests sent.
    pub loads_per_1k: f64,
    /// Resident models the servers evicted to load another, per 1,000
    /// requests sent.
    pub evictions_per_1k: f64,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid bounds")
}

fn us(d: Duration) -> u64 {
    (d.as_micros() as u64).clamp(1, 600_000_000)
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// The figures of `records`, `loads` the requests each server received,
/// `cpu` the router's CPU time over the run.
pub fn figures(
    router: &str,
    rate: f64,
    records: &[Record],
    loads: &[u64],
    cpu: Option<Duration>,
) -> Figures {
    let (mut all, mut outside, mut lag) = (histogram(), histogram(), histogram());
    let (mut ok, mut warm) = (0usize, 0usize);
    for r in records {
        all.saturating_record(us(r.latency));
        lag.saturating_record(us(r.lag));
        if let Some(time) = r.outside {
            outside.saturating_record(us(time));
        }
        if r.ok {
            ok += 1;
            warm += usize::from(!r.cold);
        }
    }
    let n = records.len().max(1);
    let mean_load = loads.iter().sum::<u64>() as f64 / loads.len().max(1) as f64;
    let max_load = loads.iter().copied().max().unwrap_or(0) as f64;
    Figures {
        router: router.to_owned(),
        rate,
        requests: records.len(),
        ok: ok as f64 / n as f64,
        warm_hit: warm as f64 / n as f64,
        mean_ms: all.mean() / 1000.0,
        p50_ms: ms(all.value_at_quantile(0.50)),
        p99_ms: ms(all.value_at_quantile(0.99)),
        max_mean: if mean_load > 0.0 {
            max_load / mean_load
        } else {
            0.0
        },
        outside_p50_ms: (!outside.is_empty()).then(|| ms(outside.value_at_quantile(0.50))),
        cpu_per_1k: cpu.map(|cpu| cpu.as_secs_f64() * 1000.0 / n as f64),
        lag_p99_ms: ms(lag.value_at_quantile(0.99)),
        prefix_hit: None,
        loads_per_1k: 0.0,
        evictions_per_1k: 0.0,
    }
}

/// The load generator's send lag, p99, past which a run's figures are
/// partly the generator's own: its requests left late, so the latencies
/// (counted from the planned time) and the rate it offered are not the
/// router's alone.
pub const LAG_BOUND_MS: f64 = 10.0;

impl Figures {
    /// Sets the servers' model loads and evictions over the run, counted
    /// per 1,000 requests sent.
    pub fn set_loads(&mut self, loads: u64, evictions: u64) {
        let per_1k = |count: u64| count as f64 * 1000.0 / self.requests.max(1) as f64;
        (self.loads_per_1k, self.evictions_per_1k) = (per_1k(loads), per_1k(evictions));
    }

    /// Whether the run meets the throughput bar: p99 under 1 s and at
    /// least 99.9% ok.
    pub fn sustained(&self) -> bool {
        self.p99_ms < 1000.0 && self.ok >= 0.999
    }

    /// The warning to print when the generator lagged past
    /// [`LAG_BOUND_MS`].
    pub fn lag_warning(&self) -> Option<String> {
        (self.lag_p99_ms > LAG_BOUND_MS).then(|| {
            format!(
                "warning: {} at {:.0} req/s: the load generator sent late, p99 {:.1} ms over {LAG_BOUND_MS} ms: the figures are partly the generator's (a busy machine?)",
                self.router, self.rate, self.lag_p99_ms
            )
        })
    }
}

/// A router's highest sustained rate, as the search found it.
#[derive(Debug, Clone)]
pub struct MaxRate {
    pub router: String,
    /// `None`: not even the lowest rate tried was sustained.
    pub rate: Option<f64>,
    /// The lowest rate tried and failed, if any.
    pub failed_at: Option<f64>,
}

fn opt(value: Option<f64>, digits: usize) -> String {
    value.map_or("-".to_owned(), |v| format!("{v:.digits$}"))
}

/// The table: one row per run, in the order run, the added latency
/// against the direct row at the same rate, and each router's max rate
/// when the search ran.
pub fn print_table(rows: &[Figures], max_rates: &[MaxRate]) {
    emit!(
        "{:<28} {:>6} {:>7} {:>7} {:>7} {:>7} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>8} {:>9}",
        "router",
        "rate",
        "sent",
        "ok%",
        "warm%",
        "hit%",
        "mean_ms",
        "p50_ms",
        "p99_ms",
        "max/mean",
        "loads/1k",
        "evict/1k",
        "added_ms",
        "cpu_s/1k",
        "lag_p99",
        "max_rate"
    );
    for f in rows {
        let direct = rows
            .iter()
            .find(|d| d.router == "direct" && d.rate == f.rate)
            .and_then(|d| d.outside_p50_ms);
        let added = match (f.router.as_str(), f.outside_p50_ms, direct) {
            ("direct", _, _) => None,
            (_, Some(ours), Some(direct)) => Some(ours - direct),
            _ => None,
        };
        let max_rate =
            max_rates
                .iter()
                .find(|m| m.router == f.router)
                .map_or("-".to_owned(), |m| match (m.rate, m.failed_at) {
                    (Some(rate), _) => format!("{rate:.0}"),
                    (None, Some(failed)) => format!("<{failed:.0}"),
                    (None, None) => "-".to_owned(),
                });
        emit!(
            "{:<28} {:>6.0} {:>7} {:>7.2} {:>7.2} {:>7} {:>8.1} {:>8.2} {:>8.1} {:>8.2} {:>8.1} {:>8.1} {:>9} {:>9} {:>8.2} {:>9}",
            f.router,
            f.rate,
            f.requests,
            f.ok * 100.0,
            f.warm_hit * 100.0,
            opt(f.prefix_hit.map(|h| h * 100.0), 2),
            f.mean_ms,
            f.p50_ms,
            f.p99_ms,
            f.max_mean,
            f.loads_per_1k,
            f.evictions_per_1k,
            opt(added, 2),
            opt(f.cpu_per_1k, 3),
            f.lag_p99_ms,
            max_rate
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_lag(lag: Duration) -> Figures {
        let record = Record {
            latency: Duration::from_millis(30),
            ok: true,
            cold: false,
            outside: None,
            lag,
        };
        figures("gateway", 100.0, &[record; 10], &[10], None)
    }

    #[test]
    fn loads_and_evictions_are_counted_per_1k_requests() {
        let mut f = with_lag(Duration::ZERO);
        assert_eq!((f.loads_per_1k, f.evictions_per_1k), (0.0, 0.0));
        // 10 requests: 3 loads and 1 eviction are 300 and 100 per 1,000.
        f.set_loads(3, 1);
        assert_eq!((f.loads_per_1k, f.evictions_per_1k), (300.0, 100.0));
    }

    #[test]
    fn a_lagging_generator_is_warned_of() {
        assert_eq!(with_lag(Duration::from_millis(2)).lag_warning(), None);
        let warning = with_lag(Duration::from_millis(25)).lag_warning().unwrap();
        assert!(warning.contains("p99 25.0 ms over 10 ms"), "{warning}");
    }
}
