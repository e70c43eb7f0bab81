//! Per-request cost of routing through `ModelBalancer` against what a user
//! would run instead, over N = 8, 64, 512 and 1024 always-ready backends.
//!
//! Group `balance`, one row per router and N:
//!
//! * `model_balancer/N`: this crate's balancer, default config;
//! * `tower_p2c_buffer/N`: tower's `balance::p2c::Balance` over `PeakEwma`
//!   endpoints behind `buffer::Buffer`. `Balance` is not `Clone`, so this is
//!   what users do to share it (as `examples/fleet` does, with the same
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
//! inference requests for 1000 model IDs drawn Zipf(1.1) in one fixed,
//! seeded sequence, built outside the timed region in chunks of 1024,
//! identically for every row.
//!
//! After the group, a table gives ns per request for each row and the
//! ratios the project's done-when names: `model_balancer/N ÷
//! tower_p2c_buffer/N` (target ≤ 0.25), `model_balancer/N ÷ tower_p2c/N`
//! (≤ 0.5) and `model_balancer/1024 ÷ model_balancer/8` (≤ 1.5). Each figure
//! is the median, over the samples criterion took of the row in this run
//! (warm-up included) of at least one chunk, of the sample's time per
//! request: the measurements criterion analyses, without a second timing
//! loop and without reading `estimates.json`, which may be left from an
//! earlier run. A median is less swayed than criterion's estimates by the
//! samples that other processes on a shared CPU preempted. Rows a filter
//! skipped show `-`; with no row measured (`--list`, `--test`) there is no
//! table.

#[path = "../tests/support/ready.rs"]
mod ready;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{black_box, BenchmarkGroup, BenchmarkId, Criterion};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::runtime::Runtime;
use tokio::time::Instant;
use tower::balance::p2c::Balance;
use tower::buffer::Buffer;
use tower::discover::ServiceList;
use tower::load::{CompleteOnResponse, PeakEwmaDiscover};
use tower::{Service, ServiceExt};
use tower_model_balance::backend::BackendId;
use tower_model_balance::balance::{Backend, BalanceConfig, ModelBalancer};

use ready::{request, Ready};

const GROUP: &str = "balance";
const SIZES: [usize; 4] = [8, 64, 512, 1024];
/// Distinct model IDs in the request stream.
const MODELS: usize = 1000;
/// Skew of model popularity (the fleet workload in DESIGN.md).
const ZIPF: f64 = 1.1;
/// Length of the precomputed model sequence each sample replays.
const SEQUENCE: usize = 1 << 16;
/// Requests built (untimed), then sent (timed), per step.
const CHUNK: usize = 1024;

type Req = http::Request<()>;
type P2c = Balance<PeakEwmaDiscover<ServiceList<Vec<Ready>>>, Req>;
type P2cBuffer = Buffer<Req, <P2c as Service<Req>>::Future>;

// === workload ===

/// The request stream every row replays.
#[derive(Debug)]
struct Workload {
    models: Vec<String>,
    sequence: Vec<u16>,
}

impl Workload {
    /// 1000 model IDs and a fixed Zipf-distributed sequence over them.
    fn new() -> Self {
        let models = (0..MODELS).map(|i| format!("model-{i:04}")).collect();
        let mut cdf: Vec<f64> = (1..=MODELS).map(|k| (k as f64).powf(-ZIPF)).collect();
        for i in 1..cdf.len() {
            cdf[i] += cdf[i - 1];
        }
        let total = cdf[MODELS - 1];
        let mut rng = SmallRng::seed_from_u64(1);
        let sequence = (0..SEQUENCE)
            .map(|_| {
                let u = rng.gen::<f64>() * total;
                cdf.partition_point(|&c| c < u).min(MODELS - 1) as u16
            })
            .collect();
        Self { models, sequence }
    }

    /// Replaces `out` with the `len` requests starting at position `from`.
    fn fill(&self, out: &mut Vec<Req>, from: u64, len: usize) {
        out.clear();
        out.extend((0..len).map(|i| {
            let at = (from as usize + i) % self.sequence.len();
            request(&self.models[usize::from(self.sequence[at])], "inference")
        }));
    }
}

// === rows ===

fn ids(n: usize) -> impl Iterator<Item = BackendId> {
    (0..n).map(|i| BackendId::new(&format!("backend-{i}")).expect("a valid ID"))
}

/// `model_balancer/N`: the balancer over `n` ready backends.
fn model_balancer(n: usize) -> ModelBalancer<Ready> {
    let backends: Vec<_> = ids(n).map(|id| Backend::new(id, Ready)).collect();
    ModelBalancer::new(ServiceList::new(backends), BalanceConfig::default())
        .expect("a list source needs no runtime")
}

/// `tower_p2c/N`: tower's P2C over PeakEwma, as `examples/fleet` builds it.
fn tower_p2c(n: usize) -> P2c {
    Balance::new(PeakEwmaDiscover::new(
        ServiceList::new(vec![Ready; n]),
        Duration::from_millis(30),
        Duration::from_secs(10),
        CompleteOnResponse::default(),
    ))
}

/// `tower_p2c_buffer/N`: the same behind a `Buffer`, whose worker runs on `rt`.
fn tower_p2c_buffer(rt: &Runtime, n: usize) -> P2cBuffer {
    let _runtime = rt.enter();
    Buffer::new(tower_p2c(n), 4096)
}

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
fn sample<S>(env: &Env, rt: &Runtime, svc: S, iters: u64) -> (S, Duration)
where
    S: Service<Req> + Send + 'static,
    S::Error: Debug,
    S::Future: Send,
{
    let workload = env.workload.clone();
    rt.block_on(async { tokio::spawn(drive(svc, workload, iters)).await })
        .expect("the caller task does not panic")
}

/// What every row shares.
#[derive(Debug)]
struct Env {
    workload: Arc<Workload>,
    /// Each row's samples of at least one chunk, in ns per request.
    samples: RefCell<BTreeMap<String, Vec<f64>>>,
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

/// Benchmarks row `kind[/n]` with `sample`, keeping its samples for the table.
fn bench_row(
    group: &mut BenchmarkGroup<'_, WallTime>,
    env: &Env,
    kind: &str,
    n: Option<usize>,
    mut sample: impl FnMut(u64) -> Duration,
) {
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
}

fn bench(c: &mut Criterion, env: &Env) {
    let mut group = c.benchmark_group(GROUP);
    {
        let rt = runtime();
        bench_row(&mut group, env, "direct", None, |iters| {
            sample(env, &rt, Ready, iters).1
        });
    }
    for n in SIZES {
        {
            // The caller task holds a clone, as each task of a server would.
            let rt = runtime();
            let balancer = model_balancer(n);
            bench_row(&mut group, env, "model_balancer", Some(n), |iters| {
                sample(env, &rt, balancer.clone(), iters).1
            });
        }
        {
            let rt = runtime();
            let buffer = tower_p2c_buffer(&rt, n);
            bench_row(&mut group, env, "tower_p2c_buffer", Some(n), |iters| {
                sample(env, &rt, buffer.clone(), iters).1
            });
        }
        {
            let rt = runtime();
            // `Balance` is not `Clone`: the task takes it and gives it back.
            let mut p2c = Some(tower_p2c(n));
            bench_row(&mut group, env, "tower_p2c", Some(n), |iters| {
                let svc = p2c.take().expect("given back by the last sample");
                let (svc, elapsed) = sample(env, &rt, svc, iters);
                p2c = Some(svc);
                elapsed
            });
        }
    }
    group.finish();
}

// === report ===

/// Prints ns per request and the done-when ratios (target in parentheses,
/// then `ok` or `MISS`) for the rows measured.
fn report(env: &Env) {
    if env.samples.borrow().is_empty() {
        return;
    }
    let get = |kind: &str, n: usize| env.median(&format!("{kind}/{n}"));
    let ratio = |a: Option<f64>, b: Option<f64>, target: f64| match (a, b) {
        (Some(a), Some(b)) => {
            let verdict = if a / b <= target { "ok" } else { "MISS" };
            format!("{:.3} {verdict}", a / b)
        }
        _ => "-".to_owned(),
    };
    println!("\n{GROUP}: ns per request, median of this run's samples");
    if let Some(ns) = env.median("direct") {
        println!("  {:<44}{ns:>12.1}", "direct");
    }
    print!("  {:<44}", "N");
    SIZES.iter().for_each(|n| print!("{n:>12}"));
    println!();
    for kind in ["model_balancer", "tower_p2c_buffer", "tower_p2c"] {
        print!("  {kind:<44}");
        for n in SIZES {
            let cell = get(kind, n).map_or_else(|| "-".to_owned(), |ns| format!("{ns:.1}"));
            print!("{cell:>12}");
        }
        println!();
    }
    for (baseline, target) in [("tower_p2c_buffer", 0.25), ("tower_p2c", 0.5)] {
        print!(
            "  {:<44}",
            format!("model_balancer ÷ {baseline} (≤ {target})")
        );
        for n in SIZES {
            let cell = ratio(get("model_balancer", n), get(baseline, n), target);
            print!("{cell:>12}");
        }
        println!();
    }
    let (small, large) = (SIZES[0], SIZES[SIZES.len() - 1]);
    println!(
        "  {:<44}{:>12}",
        format!("model_balancer/{large} ÷ model_balancer/{small} (≤ 1.5)"),
        ratio(
            get("model_balancer", large),
            get("model_balancer", small),
            1.5
        )
    );
}

fn main() {
    let env = Env {
        workload: Arc::new(Workload::new()),
        samples: RefCell::default(),
    };
    // Building requests is untimed but takes wall time: shorter phases than
    // criterion's defaults (3 s and 5 s) keep a full run of 13 rows short.
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    bench(&mut criterion, &env);
    criterion.final_summary();
    report(&env);
}
