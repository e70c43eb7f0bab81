//! The balancer's figures through the [`metrics`] facade (feature
//! `metrics`), for whatever recorder the application installs (Prometheus,
//! StatsD, OpenTelemetry...).
//!
//! ```
//! use std::time::Duration;
//! use futures_util::stream;
//! use tower::discover::Change;
//! use tower_model_balance::backend::{Backend, BackendId};
//! use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let gpu = Backend::new(BackendId::new("gpu-0").unwrap(), "10.0.0.1:8000");
//! let backends = stream::iter([Ok::<_, std::convert::Infallible>(Change::Insert(0, gpu))]);
//! let balancer = ModelBalancer::new(backends, BalanceConfig::default()).unwrap();
//! // With a recorder installed (e.g. metrics-exporter-prometheus), every 5 s:
//! let exporter = tower_model_balance::metrics::export(balancer.handle(), Duration::from_secs(5)).unwrap();
//! # drop(exporter);
//! # }
//! ```
//!
//! [`export`] starts a task that reads a [`BalancerHandle`] on an interval
//! and sets these series. The request path records nothing through the
//! facade but the two stream histograms: its counters are the balancer's
//! own atomics, read here, so exporting costs the hot path nothing. Each
//! timed event stream that succeeded records its TTFT and TPOT once, as
//! measured, when its body ends (the balancer records them itself,
//! `balance/state/stream.rs`: one registry lookup per stream, whose
//! length is seconds); they are never read back from the balancer's own
//! histograms, which keep only a bucket per sample.
//!
//! | name | kind | labels | unit, meaning |
//! | --- | --- | --- | --- |
//! | `model_balance_requests_total` | counter | `branch` | requests by the branch the balancer took: `resident_owner`, `cold_owner`, `spill`, `panic`, `update`, `no_backend`, `invalid_route` |
//! | `model_balance_shed_total` | counter | `urgency` | requests shed under admission with `Overloaded`: `urgency` is `normal`, `high` or `critical` |
//! | `model_balance_queue_length` | gauge | | requests waiting for room under admission now |
//! | `model_balance_backend_admission_limit` | gauge | `backend` | its admission limit on requests in flight, with admission on (an adaptive one where it has got to) |
//! | `model_balance_backend_requests_total` | counter | `backend` | requests sent to the backend |
//! | `model_balance_backend_failures_total` | counter | `backend` | requests failed on it (errors, 5xx, 429, failed loads) |
//! | `model_balance_backend_in_flight` | gauge | `backend` | requests in flight on it now |
//! | `model_balance_backend_breaker_state` | gauge | `backend` | its breaker: 0 closed, 1 half-open, 2 open |
//! | `model_balance_backend_breaker_trips_total` | counter | `backend` | times its breaker opened on the evidence of its calls |
//! | `model_balance_backend_breaker_transitions_total` | counter | `backend`, `to` | times its breaker entered a state: `to` is `closed`, `half_open` or `open` (by hand included) |
//! | `model_balance_backend_pair_breaker_trips_total` | counter | `backend` | in `BreakerScope::BackendModel`: times one of its (backend, model) pair breakers opened, summed over its models |
//! | `model_balance_backend_pair_breakers_open` | gauge | `backend` | in `BreakerScope::BackendModel`: its pair breakers not closed now (open or half-open) |
//! | `model_balance_backend_health_score` | gauge | `backend` | its health score, a fraction in [0, 1] |
//! | `model_balance_backend_ejected` | gauge | `backend` | 1 while health ejects it, else 0 |
//! | `model_balance_backend_ejections_total` | counter | `backend` | times health ejected it |
//! | `model_balance_backend_ttft_seconds` | histogram | `backend` | seconds to the first `data:` chunk (the first token) of its event streams that succeeded (read to their end), among the timed requests; recorded once per stream, as measured, when the stream ends (boundaries: [`TTFT_BUCKETS`]) |
//! | `model_balance_backend_tpot_seconds` | histogram | `backend` | seconds per output token of those streams: the span from a stream's first chunk to its last over its chunks less one (`[DONE]` is no chunk); recorded with its TTFT (boundaries: [`TPOT_BUCKETS`]) |
//! | `model_balance_placement_total` | counter | `event` | with placement on: `load`, `load_failure`, `unload`, `unknown_model`, `reload` |
//!
//! With feature `hedge`, [`export_hedge`] sets a
//! [`HedgeLayer`](crate::hedge::HedgeLayer)'s counters the same way:
//!
//! | name | kind | labels | unit, meaning |
//! | --- | --- | --- | --- |
//! | `model_balance_hedge_requests_total` | counter | | requests through the hedge layer |
//! | `model_balance_hedges_sent_total` | counter | | backup attempts sent |
//! | `model_balance_hedges_won_total` | counter | | requests answered by their backup's success |
//! | `model_balance_hedges_after_failure_total` | counter | | backups sent at once because the first attempt failed fast (counted in `hedges_sent` too) |
//! | `model_balance_hedges_suppressed_total` | counter | `reason` | backups due but not sent: `budget` (the budget was spent), `load` (the load gate reported the fleet over its threshold), `no_alternative` (no backend where a backup could help: see `Exclude`), `unready` (the backup's service failed its readiness) |
//! | `model_balance_hedges_skipped_total` | counter | `reason` | requests that needed or could take no backup: `ended_before_delay` (the first attempt ended, or was dropped, before the delay), `warming_up` (too few samples for a delay), `update`, `send_once` (marked `SendOnce`: not safe to send twice), `uncopyable`, `disabled` (`max_attempts` 1) |
//!
//! ## Histograms, not summaries
//!
//! The facade says only that TTFT and TPOT are distributions; how they are
//! exported is the recorder's choice. `metrics-exporter-prometheus` renders
//! a distribution without buckets as a `summary`, whose quantiles are
//! computed in each process and cannot be aggregated across gateway
//! replicas. Give it [`TTFT_BUCKETS`] and [`TPOT_BUCKETS`] and the two come
//! out as `histogram`s (`_bucket{le=…}`, `_sum`, `_count`), which
//! `histogram_quantile(0.5, sum by (le) (rate(…_bucket[5m])))` adds up
//! over every replica and backend:
//!
//! ```
//! use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
//! use tower_model_balance::metrics::{TPOT_BUCKETS, TTFT_BUCKETS};
//!
//! # fn main() -> Result<(), metrics_exporter_prometheus::BuildError> {
//! let builder = PrometheusBuilder::new()
//!     .set_buckets_for_metric(
//!         Matcher::Full("model_balance_backend_ttft_seconds".into()),
//!         &TTFT_BUCKETS,
//!     )?
//!     .set_buckets_for_metric(
//!         Matcher::Full("model_balance_backend_tpot_seconds".into()),
//!         &TPOT_BUCKETS,
//!     )?;
//! // builder.install_recorder()?  (the gateway, `crates/gateway`, does)
//! # drop(builder);
//! # Ok(())
//! # }
//! ```
//!
//! Labels are backend IDs and fixed words only — never model IDs, whose
//! number a client does not bound: the pair breakers (up to `max_pairs`,
//! 100,000 in the gateway) are summed per backend, never a series per
//! pair; read one pair with `BalancerHandle::breaker_state`. A backend that leaves keeps its last
//! values in the recorder until the recorder drops idle series.

use std::time::Duration;

use metrics::{counter, gauge, Unit};

use crate::balance::BalancerHandle;
use crate::breaker::BreakerState;
use crate::error::NoRuntime;
#[cfg(feature = "hedge")]
use crate::hedge::HedgeHandle;
use crate::task::BackgroundTask;

/// Bucket boundaries (upper bounds, in seconds) for
/// `model_balance_backend_ttft_seconds`: 1 ms to 2 560 s, fine from 20 ms
/// to 1 s where most first tokens come, coarse out to a cold load that
/// takes minutes.
///
/// Source: vLLM's own `vllm:time_to_first_token_seconds` histogram
/// (`vllm/v1/metrics/loggers.py`), so that the gateway's series and its
/// backends' can be compared bucket by bucket (same `le`). See the
/// [module docs](self) for handing them to a Prometheus recorder.
pub const TTFT_BUCKETS: [f64; 22] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];

/// Bucket boundaries (upper bounds, in seconds) for
/// `model_balance_backend_tpot_seconds`: 0.5 ms to 2.5 s.
///
/// Source: vLLM's `vllm:time_per_output_token_seconds` (since renamed
/// `vllm:inter_token_latency_seconds`) from 10 ms to 2.5 s, with five
/// boundaries below its first (0.5, 1, 2.5, 5 and 7.5 ms): small models,
/// speculative decoding and servers that send several tokens a chunk
/// give sub-10 ms gaps, which vLLM's first bucket would lump together;
/// past 2.5 s a gap is a stall, not a pace worth resolving.
pub const TPOT_BUCKETS: [f64; 18] = [
    0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
    0.75, 1.0, 2.5,
];

/// Sets the series of the [module docs](self) from `handle` now, then
/// every `interval` (at least 10 ms), in a task on the current Tokio
/// runtime.
///
/// # Errors
///
/// [`NoRuntime`] outside a Tokio runtime (nothing is started).
pub fn export(handle: BalancerHandle, interval: Duration) -> Result<BackgroundTask, NoRuntime> {
    every(interval, move || record(&handle))
}

/// Sets the hedge series of the [module docs](self) from `handle` now,
/// then every `interval` (at least 10 ms), in a task on the current Tokio
/// runtime.
///
/// # Errors
///
/// [`NoRuntime`] outside a Tokio runtime (nothing is started).
#[cfg(feature = "hedge")]
#[cfg_attr(docsrs, doc(cfg(feature = "hedge")))]
pub fn export_hedge(handle: HedgeHandle, interval: Duration) -> Result<BackgroundTask, NoRuntime> {
    every(interval, move || record_hedge(&handle))
}

/// Runs `set` now and then every `interval` (at least 10 ms).
fn every(interval: Duration, set: impl Fn() + Send + 'static) -> Result<BackgroundTask, NoRuntime> {
    let runtime = NoRuntime::current()?;
    describe();
    let interval = interval.max(Duration::from_millis(10));
    let task = runtime.spawn(async move {
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            set();
        }
    });
    Ok(BackgroundTask::new(task))
}

/// Whether a series is a counter, a gauge or a histogram (of seconds).
#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Every series of the [module docs](self): name, kind, help text.
const SERIES: [(&str, Kind, &str); 24] = [
    (
        "model_balance_requests_total",
        Kind::Counter,
        "Requests by the branch the balancer took.",
    ),
    (
        "model_balance_shed_total",
        Kind::Counter,
        "Requests shed under admission (Overloaded), by urgency: normal, high, critical.",
    ),
    (
        "model_balance_queue_length",
        Kind::Gauge,
        "Requests waiting for room under admission now.",
    ),
    (
        "model_balance_backend_admission_limit",
        Kind::Gauge,
        "The backend's admission limit on requests in flight (absent without admission).",
    ),
    (
        "model_balance_backend_requests_total",
        Kind::Counter,
        "Requests sent to the backend.",
    ),
    (
        "model_balance_backend_failures_total",
        Kind::Counter,
        "Requests failed on the backend (errors, 5xx, 429, failed loads).",
    ),
    (
        "model_balance_backend_in_flight",
        Kind::Gauge,
        "Requests in flight on the backend.",
    ),
    (
        "model_balance_backend_breaker_state",
        Kind::Gauge,
        "The backend's breaker: 0 closed, 1 half-open, 2 open.",
    ),
    (
        "model_balance_backend_breaker_trips_total",
        Kind::Counter,
        "Times the backend's breaker opened on the evidence of its calls.",
    ),
    (
        "model_balance_backend_breaker_transitions_total",
        Kind::Counter,
        "Times the backend's breaker entered a state.",
    ),
    (
        "model_balance_backend_pair_breaker_trips_total",
        Kind::Counter,
        "Times one of the backend's (backend, model) pair breakers opened, over all its models.",
    ),
    (
        "model_balance_backend_pair_breakers_open",
        Kind::Gauge,
        "The backend's (backend, model) pair breakers open or half-open now.",
    ),
    (
        "model_balance_backend_health_score",
        Kind::Gauge,
        "The backend's health score, a fraction in [0, 1].",
    ),
    (
        "model_balance_backend_ejected",
        Kind::Gauge,
        "1 while health ejects the backend, else 0.",
    ),
    (
        "model_balance_backend_ejections_total",
        Kind::Counter,
        "Times health ejected the backend.",
    ),
    (
        "model_balance_backend_ttft_seconds",
        Kind::Histogram,
        "Time to first token of the backend's event streams that succeeded (timed requests), seconds.",
    ),
    (
        "model_balance_backend_tpot_seconds",
        Kind::Histogram,
        "Time per output token (mean gap between chunks) of the backend's event streams, seconds.",
    ),
    (
        "model_balance_placement_total",
        Kind::Counter,
        "Placement events: loads, load failures, unloads, unknown models, reloads.",
    ),
    (
        "model_balance_hedge_requests_total",
        Kind::Counter,
        "Requests through the hedge layer.",
    ),
    (
        "model_balance_hedges_sent_total",
        Kind::Counter,
        "Backup attempts sent.",
    ),
    (
        "model_balance_hedges_won_total",
        Kind::Counter,
        "Requests answered by their backup's success.",
    ),
    (
        "model_balance_hedges_after_failure_total",
        Kind::Counter,
        "Backups sent at once because the first attempt failed fast.",
    ),
    (
        "model_balance_hedges_suppressed_total",
        Kind::Counter,
        "Backups due but not sent, by reason: budget, load, no_alternative or unready.",
    ),
    (
        "model_balance_hedges_skipped_total",
        Kind::Counter,
        "Requests that needed or could take no backup, by reason: ended_before_delay, warming_up, update, send_once, uncopyable or disabled.",
    ),
];

/// Gives the installed recorder every series' kind and help text (the
/// `# HELP` lines of a Prometheus scrape). [`export`] and
/// [`export_hedge`] call it; call it once yourself when you call
/// [`record`] or [`record_hedge`] by hand.
pub fn describe() {
    for (name, kind, help) in SERIES {
        match kind {
            Kind::Counter => metrics::describe_counter!(name, Unit::Count, help),
            Kind::Gauge => metrics::describe_gauge!(name, help),
            Kind::Histogram => metrics::describe_histogram!(name, Unit::Seconds, help),
        }
    }
}

/// Sets the hedge series once from `handle` (what [`export_hedge`] does
/// each interval).
#[cfg(feature = "hedge")]
#[cfg_attr(docsrs, doc(cfg(feature = "hedge")))]
pub fn record_hedge(handle: &HedgeHandle) {
    let stats = handle.stats();
    counter!("model_balance_hedge_requests_total").absolute(stats.requests);
    counter!("model_balance_hedges_sent_total").absolute(stats.hedges);
    counter!("model_balance_hedges_won_total").absolute(stats.hedges_won);
    counter!("model_balance_hedges_after_failure_total").absolute(stats.hedges_after_failure);
    for (reason, value) in [
        ("budget", stats.suppressed_by_budget),
        ("load", stats.suppressed_by_load),
        ("no_alternative", stats.suppressed_by_no_alternative),
        ("unready", stats.backup_unready),
    ] {
        counter!("model_balance_hedges_suppressed_total", "reason" => reason).absolute(value);
    }
    for (reason, value) in [
        ("ended_before_delay", stats.ended_before_delay),
        ("warming_up", stats.warming_up),
        ("update", stats.updates),
        ("send_once", stats.send_once),
        ("uncopyable", stats.uncopyable),
        ("disabled", stats.disabled),
    ] {
        counter!("model_balance_hedges_skipped_total", "reason" => reason).absolute(value);
    }
}

/// Sets every series once from `handle` (what [`export`] does each
/// interval).
pub fn record(handle: &BalancerHandle) {
    let stats = handle.stats();
    for (branch, value) in [
        ("resident_owner", stats.resident_owner),
        ("cold_owner", stats.cold_owner),
        ("spill", stats.spill),
        ("panic", stats.panic),
        ("update", stats.update),
        ("no_backend", stats.no_backend),
        ("invalid_route", stats.invalid_route),
    ] {
        counter!("model_balance_requests_total", "branch" => branch).absolute(value);
    }
    for (urgency, value) in [
        ("normal", stats.shed_normal),
        ("high", stats.shed_high),
        ("critical", stats.shed_critical),
    ] {
        counter!("model_balance_shed_total", "urgency" => urgency).absolute(value);
    }
    gauge!("model_balance_queue_length").set(handle.queue_len() as f64);
    for (id, limit) in handle.admission_limits() {
        if limit != usize::MAX {
            gauge!("model_balance_backend_admission_limit", "backend" => id.to_string())
                .set(limit as f64);
        }
    }
    for b in handle.backends() {
        let id = b.id.to_string();
        let label = || [("backend", id.clone())];
        counter!("model_balance_backend_requests_total", &label()).absolute(b.picked);
        counter!("model_balance_backend_failures_total", &label()).absolute(b.failures);
        gauge!("model_balance_backend_in_flight", &label()).set(b.in_flight as f64);
        let state = match b.breaker {
            BreakerState::Closed => 0.0,
            BreakerState::HalfOpen => 1.0,
            _ => 2.0,
        };
        gauge!("model_balance_backend_breaker_state", &label()).set(state);
        counter!("model_balance_backend_breaker_trips_total", &label()).absolute(b.breaker_trips);
        let t = b.breaker_transitions;
        for (to, value) in [
            ("closed", t.to_closed),
            ("half_open", t.to_half_open),
            ("open", t.to_open),
        ] {
            let labels = [("backend", id.clone()), ("to", to.to_owned())];
            counter!("model_balance_backend_breaker_transitions_total", &labels).absolute(value);
        }
        counter!("model_balance_backend_pair_breaker_trips_total", &label())
            .absolute(b.pair_breaker_trips);
        gauge!("model_balance_backend_pair_breakers_open", &label())
            .set(b.pair_breakers_open as f64);
        gauge!("model_balance_backend_health_score", &label()).set(b.health);
        gauge!("model_balance_backend_ejected", &label()).set(f64::from(u8::from(b.ejected)));
        counter!("model_balance_backend_ejections_total", &label()).absolute(b.ejections);
    }
    if let Some(p) = handle.placement_stats() {
        for (event, value) in [
            ("load", p.loads),
            ("load_failure", p.load_failures),
            ("unload", p.unloads),
            ("unknown_model", p.unknown_models),
            ("reload", p.reloads),
        ] {
            counter!("model_balance_placement_total", "event" => event).absolute(value);
        }
    }
}
