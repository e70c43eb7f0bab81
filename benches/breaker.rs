//! Cost of a closed breaker — admission and record on their own, and the
//! layer around a service — against the floors of a lock and an atomic and
//! against the circuit breakers users reach for instead.
//!
//! Group `breaker`, one row each, all in one run:
//!
//! * `admit_record`: this crate's [`Breaker`], closed, default policy:
//!   `try_acquire_at(now)` then `record_at(Outcome::Success, now)`, with one
//!   `now` read before the loop (the balancer's path passes `now` in);
//! * `mutex`: an uncontended `std::sync::Mutex<u64>`: lock, increment,
//!   unlock — the floor for any breaker that takes a lock per call;
//! * `atomic`: `AtomicU64::fetch_add(1, Relaxed)` — the floor of all;
//! * `failsafe_default`: the `failsafe` crate's `CircuitBreaker::call` with
//!   its default policy (`Config::new().build()`) around a closure that
//!   returns `Ok`;
//! * `tower_resilience`: `tower-resilience-circuitbreaker`'s layer, default
//!   config, with the documented `classify_response` for services whose
//!   errors are responses (5xx and 429 are failures, as our default
//!   classifier has it), around an always-ready service;
//! * `layer`: this crate's `CircuitBreakerLayer`, default policy and
//!   classifier, around the same service.
//!
//! The two layer rows are driven alike: the service is built once and owned
//! by the caller; each request is `ready().await`, `call(req).await`, drop
//! the response, with `req` a bare `http::Request::new(())`. Each sample is
//! one `block_on` of a loop over all its requests on a current-thread tokio
//! runtime (one per row), so the runtime's per-`block_on` cost is spread
//! over the sample rather than paid per request, and no task hop is timed.
//! (This is what criterion's `to_async` would do, without its feature.)
//!
//! After the group, a table gives ns per operation for each row and the
//! ratios the project's done-when names: `admit_record ÷ mutex` (target
//! ≤ 3), `admit_record ÷ failsafe_default` (< 1) and `layer ÷
//! tower_resilience` (< 1). Each figure is the median, over the samples
//! criterion took of the row in this run (warm-up included) of at least
//! 1024 operations, of the sample's time per operation: the measurements
//! criterion analyses, without a second timing loop and without reading
//! `estimates.json`, which may be left from an earlier run. Rows a filter
//! skipped show `-`; with no row measured (`--list`, `--test`) there is no
//! table.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{black_box, BenchmarkGroup, Criterion};
use failsafe::CircuitBreaker as _;
use tokio::runtime::Runtime;
use tokio::time::Instant;
use tower::{Service, ServiceBuilder, ServiceExt};
use tower_model_balance::breaker::{Breaker, BreakerConfig, CircuitBreakerLayer};
use tower_model_balance::classify::Outcome;
use tower_model_balance_test_support::ready;

use ready::Ready;

const GROUP: &str = "breaker";
/// Samples shorter than this are left out of the table: timer resolution.
const MIN_OPS: u64 = 1024;

type Req = http::Request<()>;
type Rsp = <Ready as Service<Req>>::Response;

/// What the table reads: each row's samples of at least `MIN_OPS`
/// operations, in ns per operation.
#[derive(Debug, Default)]
struct Samples(RefCell<BTreeMap<&'static str, Vec<f64>>>);

impl Samples {
    /// Median ns per operation of `row` in this run, if criterion measured it.
    fn median(&self, row: &str) -> Option<f64> {
        let mut ns = self.0.borrow().get(row)?.clone();
        ns.sort_by(f64::total_cmp);
        Some(ns[ns.len() / 2])
    }
}

// === timing ===

/// Runs `op` `iters` times and returns the time it took.
fn repeat(iters: u64, mut op: impl FnMut()) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        op();
    }
    start.elapsed()
}

/// Sends `iters` bare requests through `svc`, one at a time.
async fn drive<S>(svc: &mut S, iters: u64) -> Duration
where
    S: Service<Req>,
    S::Error: Debug,
{
    let start = Instant::now();
    for _ in 0..iters {
        svc.ready().await.expect("the service is always ready");
        black_box(
            svc.call(http::Request::new(()))
                .await
                .expect("the service never fails"),
        );
    }
    start.elapsed()
}

/// A current-thread runtime for one layer row.
fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Benchmarks `row` with `sample`, keeping its samples for the table.
fn bench_row(
    group: &mut BenchmarkGroup<'_, WallTime>,
    samples: &Samples,
    row: &'static str,
    mut sample: impl FnMut(u64) -> Duration,
) {
    group.bench_function(row, |b| {
        b.iter_custom(|iters| {
            let elapsed = sample(iters);
            if iters >= MIN_OPS {
                let ns = elapsed.as_nanos() as f64 / iters as f64;
                samples.0.borrow_mut().entry(row).or_default().push(ns);
            }
            elapsed
        })
    });
}

// === rows ===

fn bench(c: &mut Criterion, samples: &Samples) {
    let mut group = c.benchmark_group(GROUP);

    let breaker = Breaker::new(
        BreakerConfig::builder()
            .build()
            .expect("the default policy"),
    );
    let now = Instant::now();
    bench_row(&mut group, samples, "admit_record", |iters| {
        repeat(iters, || {
            let permit = black_box(&breaker)
                .try_acquire_at(now)
                .expect("the breaker stays closed");
            permit.record_at(Outcome::Success, now);
        })
    });

    let mutex = Mutex::new(0_u64);
    bench_row(&mut group, samples, "mutex", |iters| {
        repeat(iters, || {
            *black_box(&mutex).lock().expect("never poisoned") += 1;
        })
    });

    let atomic = AtomicU64::new(0);
    bench_row(&mut group, samples, "atomic", |iters| {
        repeat(iters, || {
            black_box(&atomic).fetch_add(1, Ordering::Relaxed);
        })
    });

    let failsafe = failsafe::Config::new().build();
    bench_row(&mut group, samples, "failsafe_default", |iters| {
        repeat(iters, || {
            black_box(black_box(&failsafe).call(|| Ok::<(), ()>(()))).expect("closed, and Ok");
        })
    });

    {
        let rt = runtime();
        let layer = tower_resilience_circuitbreaker::CircuitBreakerLayer::builder()
            .classify_response(|rsp: &Rsp| {
                rsp.status().is_server_error()
                    || rsp.status() == http::StatusCode::TOO_MANY_REQUESTS
            })
            .build()
            .expect("the default config");
        let mut svc = ServiceBuilder::new().layer(layer).service(Ready);
        bench_row(&mut group, samples, "tower_resilience", |iters| {
            rt.block_on(drive(&mut svc, iters))
        });
    }

    {
        let rt = runtime();
        let layer = CircuitBreakerLayer::new(
            BreakerConfig::builder()
                .build()
                .expect("the default policy"),
        );
        let mut svc = ServiceBuilder::new().layer(layer).service(Ready);
        bench_row(&mut group, samples, "layer", |iters| {
            rt.block_on(drive(&mut svc, iters))
        });
    }

    group.finish();
}

// === report ===

/// Prints ns per operation and the done-when ratios (target in
/// parentheses, then `ok` or `MISS`) for the rows measured.
fn report(samples: &Samples) {
    if samples.0.borrow().is_empty() {
        return;
    }
    let rows = [
        "admit_record",
        "mutex",
        "atomic",
        "failsafe_default",
        "tower_resilience",
        "layer",
    ];
    println!("\n{GROUP}: ns per operation, median of this run's samples");
    for row in rows {
        let cell = samples
            .median(row)
            .map_or_else(|| "-".to_owned(), |ns| format!("{ns:.1}"));
        println!("  {row:<40}{cell:>12}");
    }
    // (numerator, denominator, target, whether the target may be reached)
    let ratios = [
        ("admit_record", "mutex", 3.0, true),
        ("admit_record", "failsafe_default", 1.0, false),
        ("layer", "tower_resilience", 1.0, false),
    ];
    for (a, b, target, inclusive) in ratios {
        let label = format!("{a} ÷ {b} ({} {target})", if inclusive { "≤" } else { "<" });
        let cell = match (samples.median(a), samples.median(b)) {
            (Some(a), Some(b)) => {
                let ratio = a / b;
                let ok = if inclusive {
                    ratio <= target
                } else {
                    ratio < target
                };
                format!("{ratio:.3} {}", if ok { "ok" } else { "MISS" })
            }
            _ => "-".to_owned(),
        };
        println!("  {label:<40}{cell:>12}");
    }
}

fn main() {
    let samples = Samples::default();
    // Shorter phases than criterion's defaults (3 s and 5 s), as in the
    // `balance` bench: six rows of nanosecond operations need no more.
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    bench(&mut criterion, &samples);
    criterion.final_summary();
    report(&samples);
}
