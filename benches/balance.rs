//! Per-request cost of routing through `ModelBalancer` against what a user
//! would run instead, over N = 8, 64, 512, 1024 and 10 000 always-ready
//! backends.
//!
//! Group `balance`, one row per router and N:
//!
//! * `model_balancer/N`: this crate's balancer, default config, over
//!   backends that hold the fleet's working set: each declares
//!   [`BackendMeta::MAX_MODEL_SLOTS`] (16) model slots, as a user sets
//!   `with_model_slots` to what a backend's GPU memory holds, and the
//!   fleet workload's 128 models fit even N = 8 (8 × 16 slots). Residency
//!   is learned from the requests routed (criterion's warm-up loads every
//!   model once), so nearly every pick is warm — an owner with the model
//!   resident — as in the fleet example's default scenario;
//! * `model_balancer_cold/N`: the cold path, reported beside it without a
//!   target: default config and default model slots (4) under the wide
//!   workload of 1000 models, so most picks at small N find the model
//!   absent and stamp its residency (about 58% at N = 8);
//! * `model_balancer_route/N`: the same balancer and fleet workload, each
//!   request's route in a [`RouteInfo`] extension (model only), as
//!   `ModelFromBodyLayer` leaves it in front of the balancer: the baseline
//!   of the prefix key's cost;
//! * `model_balancer_prefix/N`: the same balancer routing by a prefix key
//!   ([`PrefixKey`]): the requests of one LLM (`llama-3-8b`), each with a
//!   [`RouteInfo`] extension whose key's group is drawn Zipf(1.1) from 128
//!   prompt prefixes, and whose session is one of 4096 conversations — the
//!   ring walk and demand keyed by the group, each owner's prefix record
//!   read and the chosen one's written. The key is hashed when the request
//!   is built (as `ModelFromBodyLayer` does, reading the body), untimed;
//!   the target is `model_balancer_prefix/N ÷ model_balancer_route/N` ≤
//!   1.2 (the key's cost; `÷ model_balancer/N` is shown too);
//! * `tower_p2c_buffer/N`: tower's `balance::p2c::Balance` over `PeakEwma`
//!   endpoints behind `buffer::Buffer`. `Balance` is not `Clone`, so this is
//!   what users do to share it (as the fleet example does, with the same
//!   PeakEwma parameters and bound);
//! * `tower_p2c/N`: the same `Balance` owned by the caller, no `Buffer`: the
//!   bare cost of tower's pick, which only a single owner gets;
//! * `direct`: one backend, no balancer — the floor.
//!
//! Every row does the same work per request apart from the routing:
//! `ready().await`, `call(req).await`, drop the response, in a caller task
//! spawned on a 2-worker multi-thread runtime (one per row). That task
//! holds a clone of the `ModelBalancer` or `Buffer`, as each task of a
//! server would; the one `Balance` of `tower_p2c` moves into it and back. The requests are
//! inference requests for model IDs drawn Zipf(1.1) in one fixed, seeded
//! sequence, built outside the timed region in chunks of 1024: the fleet
//! workload (128 model IDs) for every row but `model_balancer_cold`, the
//! wide workload (1000 model IDs) for that one. The IDs have the same
//! length in both.
//!
//! After the group, a table gives ns per request for each row; for each
//! balancer row the warm share, `resident_owner ÷ (resident_owner +
//! cold_owner + spill + panic)` from the balancer's
//! [`stats`](tower_model_balance::balance::BalancerHandle::stats), counted
//! over the row's whole run (warm-up included; a spill counts as not warm);
//! and, for the warm rows, the ratios the project's done-when names:
//! `model_balancer/N ÷ tower_p2c_buffer/N` (target ≤ 0.25),
//! `model_balancer/N ÷ tower_p2c/N` (≤ 0.5), `model_balancer/10000 ÷
//! model_balancer/8` (≤ 1.5: the pick flat in the fleet's size; `/1024 ÷
//! /8` is shown too) and `model_balancer_prefix/N ÷
//! model_balancer_route/N` (≤ 1.2). The ratios hold on a warm fleet: after the
//! table the bench panics if a `model_balancer` row it measured had a warm
//! share under 90%, as its figure would then time the cold path. Each figure
//! is the median, over the samples criterion took of the row in this run
//! (warm-up included) of at least one chunk, of the sample's time per
//! request: the measurements criterion analyses, without a second timing
//! loop and without reading `estimates.json`, which may be left from an
//! earlier run. A median is less swayed than criterion's estimates by the
//! samples that other processes on a shared CPU preempted. Rows a filter
//! skipped show `-`; with no row measured (`--list`, `--test`) there is no
//! table. (The heap a balancer holds per backend, 1024 to 10 000 backends,
//! is `tests/memory_per_backend.rs`'s: a counting allocator here would tax
//! the baselines that allocate per request.)

#[path = "balance/report.rs"]
mod report;
#[path = "balance/rows.rs"]
mod rows;
#[path = "balance/workload.rs"]
mod workload;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{black_box, BenchmarkGroup, BenchmarkId, Criterion};
use tokio::runtime::Runtime;
use tokio::time::Instant;
use tower::balance::p2c::Balance;
use tower::buffer::Buffer;
use tower::discover::ServiceList;
use tower::load::PeakEwmaDiscover;
use tower::{Service, ServiceExt};
use tower_model_balance::balance::{BackendMeta, BalancerHandle};
use tower_model_balance_test_support::ready;

use ready::Ready;
use rows::{model_balancer, tower_p2c, tower_p2c_buffer, warm_share};
use workload::Workload;

const GROUP: &str = "balance";
const SIZES: [usize; 5] = [8, 64, 512, 1024, 10_000];
/// Distinct model IDs in the fleet workload: the most that N = 8 backends
/// of [`BackendMeta::MAX_MODEL_SLOTS`] slots hold at once.
const FLEET_MODELS: usize = 128;
/// Distinct model IDs in the wide workload of `model_balancer_cold`.
const WIDE_MODELS: usize = 1000;
/// Least warm share of a `model_balancer` row for its figure to count.
const MIN_WARM: f64 = 0.9;
/// Requests built (untimed), then sent (timed), per step.
const CHUNK: usize = 1024;

type Req = http::Request<()>;
type P2c = Balance<PeakEwmaDiscover<ServiceList<Vec<Ready>>>, Req>;
type P2cBuffer = Buffer<Req, <P2c as Service<Req>>::Future>;

// === timing ===

/// Sends `iters` requests through `svc`, one at a time, and returns it with
/// the time spent sending (request building excluded).
async fn drive<S>(mut svc: S, workload: Arc<Workload>, iters: u64) -> (S, Duration)
where
    S: Service<Req>,
    S::Error: Debug,
{
    let mut requests = Vec::with_capacity(CHUNK);
    let mut elapsed = Duration::ZERO;
    let mut sent = 0;
    while sent < iters {
        let len = (iters - sent).min(CHUNK as u64) as usize;
        workload.fill(&mut requests, sent, len);
        let start = Instant::now();
        for req in requests.drain(..) {
            svc.ready().await.expect("the endpoints never fail");
            black_box(svc.call(req).await.expect("the endpoints never fail"));
        }
        elapsed += start.elapsed();
        sent += len as u64;
    }
    (svc, elapsed)
}

/// One sample: `drive` in a caller task spawned on the row's runtime.
fn sample<S>(workload: &Arc<Workload>, rt: &Runtime, svc: S, iters: u64) -> (S, Duration)
where
    S: Service<Req> + Send + 'static,
    S::Error: Debug,
    S::Future: Send,
{
    let workload = workload.clone();
    rt.block_on(async { tokio::spawn(drive(svc, workload, iters)).await })
        .expect("the caller task does not panic")
}

/// What every row shares.
#[derive(Debug)]
struct Env {
    /// The fleet workload: every row but `model_balancer_cold`.
    fleet: Arc<Workload>,
    /// The wide workload of `model_balancer_cold`.
    wide: Arc<Workload>,
    /// The prefix workload of `model_balancer_prefix`.
    prefix: Arc<Workload>,
    /// The fleet workload with routes in extensions, of
    /// `model_balancer_route`.
    routes: Arc<Workload>,
    /// Each row's samples of at least one chunk, in ns per request.
    samples: RefCell<BTreeMap<String, Vec<f64>>>,
    /// Each balancer row's warm share over its run, if it was measured.
    warm: RefCell<BTreeMap<String, f64>>,
}

impl Env {
    /// Median ns per request of `row` in this run, if criterion measured it.
    fn median(&self, row: &str) -> Option<f64> {
        let mut ns = self.samples.borrow().get(row)?.clone();
        ns.sort_by(f64::total_cmp);
        Some(ns[ns.len() / 2])
    }
}

/// A 2-worker multi-thread runtime. Each row gets its own, dropped after
/// it: a row's worker threads, and what they left in their allocator
/// caches, do not carry into the next row. (With one runtime for all rows,
/// rows measured after a `tower_p2c_buffer` row — whose worker drops the
/// requests on another thread than the one that built them — ran 5–15%
/// slower than alone.)
fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime")
}

// === rows in the group ===

/// Benchmarks row `kind[/n]` with `sample`, keeping its samples for the
/// table. Returns the row's name.
fn bench_row(
    group: &mut BenchmarkGroup<'_, WallTime>,
    env: &Env,
    kind: &str,
    n: Option<usize>,
    mut sample: impl FnMut(u64) -> Duration,
) -> String {
    let (id, row) = match n {
        Some(n) => (BenchmarkId::new(kind, n), format!("{kind}/{n}")),
        None => (BenchmarkId::from_parameter(kind), kind.to_owned()),
    };
    group.bench_function(id, |b| {
        b.iter_custom(|iters| {
            let elapsed = sample(iters);
            if iters >= CHUNK as u64 {
                let ns = elapsed.as_nanos() as f64 / iters as f64;
                env.samples
                    .borrow_mut()
                    .entry(row.clone())
                    .or_default()
                    .push(ns);
            }
            elapsed
        })
    });
    row
}

/// Benchmarks the balancer row `kind/n` and keeps its warm share, when
/// criterion measured it (not when a filter skipped it, nor in `--test`).
fn bench_balancer(
    group: &mut BenchmarkGroup<'_, WallTime>,
    env: &Env,
    kind: &str,
    n: usize,
    (slots, workload): (usize, &Arc<Workload>),
) {
    let rt = runtime();
    let balancer = model_balancer(n, slots);
    let handle: BalancerHandle = balancer.handle();
    // The caller task holds a clone, as each task of a server would.
    let row = bench_row(group, env, kind, Some(n), |iters| {
        sample(workload, &rt, balancer.clone(), iters).1
    });
    if env.samples.borrow().contains_key(&row) {
        if let Some(share) = warm_share(handle.stats()) {
            env.warm.borrow_mut().insert(row, share);
        }
    }
}

fn bench(c: &mut Criterion, env: &Env) {
    let mut group = c.benchmark_group(GROUP);
    {
        let rt = runtime();
        bench_row(&mut group, env, "direct", None, |iters| {
            sample(&env.fleet, &rt, Ready, iters).1
        });
    }
    for n in SIZES {
        let warm = (BackendMeta::MAX_MODEL_SLOTS, &env.fleet);
        bench_balancer(&mut group, env, "model_balancer", n, warm);
        let routes = (BackendMeta::MAX_MODEL_SLOTS, &env.routes);
        bench_balancer(&mut group, env, "model_balancer_route", n, routes);
        let prefix = (BackendMeta::MAX_MODEL_SLOTS, &env.prefix);
        bench_balancer(&mut group, env, "model_balancer_prefix", n, prefix);
        let cold = (BackendMeta::DEFAULT_MODEL_SLOTS, &env.wide);
        bench_balancer(&mut group, env, "model_balancer_cold", n, cold);
        {
            let rt = runtime();
            let buffer = tower_p2c_buffer(&rt, n);
            bench_row(&mut group, env, "tower_p2c_buffer", Some(n), |iters| {
                sample(&env.fleet, &rt, buffer.clone(), iters).1
            });
        }
        {
            let rt = runtime();
            // `Balance` is not `Clone`: the task takes it and gives it back.
            let mut p2c = Some(tower_p2c(n));
            bench_row(&mut group, env, "tower_p2c", Some(n), |iters| {
                let svc = p2c.take().expect("given back by the last sample");
                let (svc, elapsed) = sample(&env.fleet, &rt, svc, iters);
                p2c = Some(svc);
                elapsed
            });
        }
    }
    group.finish();
}

fn main() {
    let env = Env {
        fleet: Arc::new(Workload::new(FLEET_MODELS)),
        wide: Arc::new(Workload::new(WIDE_MODELS)),
        prefix: Arc::new(Workload::prefixed(FLEET_MODELS)),
        routes: Arc::new(Workload::with_routes(FLEET_MODELS)),
        samples: RefCell::default(),
        warm: RefCell::default(),
    };
    // Building requests is untimed but takes wall time: shorter phases than
    // criterion's defaults (3 s and 5 s) keep a full run of 25 rows short.
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    bench(&mut criterion, &env);
    criterion.final_summary();
    report::report(&env);
}
