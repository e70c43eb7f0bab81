//! Cost of finding a model's owners on the ring against Google's Maglev
//! lookup table (the `maglev` crate), over the same backends and the same
//! precomputed model hashes, side by side in one run.
//!
//! Group `ring`, one row per lookup and N = 8, 64, 512 and 1024 backends
//! (150 vnodes, weight 1):
//!
//! * `candidates/N`: the primary owner (k = 1), `Ring::primary`;
//! * `owners/N`: the same through a walk, `ring.owners(hash, 1).next()`, as
//!   the balancer reads owners;
//! * `maglev/N`: `Maglev::get` through an identity hasher, so both sides
//!   start from the same 64-bit hash.
//!
//! Each row cycles through 4096 xxh3 model hashes, so lookups spread over
//! the tables rather than hitting one cache line. Maglev is the fastest
//! stable mapping we know of (one table read) but yields one owner, not an
//! order to spill along; the target is `candidates/1024` within 1.5× of
//! `maglev/1024`. After the group, a table gives each row's median ns per
//! lookup over the samples criterion took in this run (of at least 1000
//! lookups; not criterion's `estimates.json`, which a filtered run would
//! leave from an earlier one) and its ratio to Maglev at the same N.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use tokio::time::Instant;

use criterion::{black_box, BenchmarkId, Criterion};
use maglev::{ConsistentHasher, Maglev};
use tower_model_balance::backend::BackendId;
use tower_model_balance::ring::{Ring, RingConfig};
use tower_model_balance::route::ModelId;

const GROUP: &str = "ring";
const SIZES: [usize; 4] = [8, 64, 512, 1024];
const MODELS: usize = 4096;

/// Hands Maglev the precomputed hash as it is. Maglev writes a seed, then
/// the key; the hash is the last integer written.
#[derive(Debug, Clone, Copy, Default)]
struct Identity;

struct IdentityHasher(u64);

impl BuildHasher for Identity {
    type Hasher = IdentityHasher;

    fn build_hasher(&self) -> IdentityHasher {
        IdentityHasher(0)
    }
}

impl Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 << 8) | u64::from(byte);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

fn backend(i: usize) -> BackendId {
    BackendId::new(&format!("backend-{i}")).unwrap()
}

/// Each row's samples of at least [`MIN_ITERS`] lookups, in ns per lookup.
type Samples = RefCell<BTreeMap<String, Vec<f64>>>;

/// Samples shorter than this are left out of the table (timer resolution).
const MIN_ITERS: u64 = 1_000;

/// Times `iters` calls of `op`, keeping the sample for `row`'s median.
fn timed(samples: &Samples, row: &str, iters: u64, mut op: impl FnMut()) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        op();
    }
    let elapsed = start.elapsed();
    if iters >= MIN_ITERS {
        let ns = elapsed.as_nanos() as f64 / iters as f64;
        samples
            .borrow_mut()
            .entry(row.to_owned())
            .or_default()
            .push(ns);
    }
    elapsed
}

fn bench(c: &mut Criterion, samples: &Samples) {
    let hashes: Vec<u64> = (0..MODELS)
        .map(|i| ModelId::new(&format!("model-{i}")).unwrap().hash64())
        .collect();
    let mut next = {
        let mut i = 0;
        move || {
            i = (i + 1) % MODELS;
            hashes[i]
        }
    };
    let mut group = c.benchmark_group(GROUP);
    for n in SIZES {
        let ring = Ring::build(&RingConfig::default(), (0..n).map(|i| (backend(i), 1))).unwrap();
        // Maglev's nodes are the xxh3 hashes of the same backend IDs, so the
        // identity hasher still spreads its permutations.
        let nodes = (0..n).map(|i| xxhash_rust::xxh3::xxh3_64(backend(i).as_bytes()));
        let maglev = Maglev::with_hasher(nodes, Identity);

        let row = |name: &str| format!("{name}/{n}");
        group.bench_function(BenchmarkId::new("candidates", n), |b| {
            b.iter_custom(|iters| {
                timed(samples, &row("candidates"), iters, || {
                    black_box(ring.primary(black_box(next())));
                })
            })
        });
        group.bench_function(BenchmarkId::new("owners", n), |b| {
            b.iter_custom(|iters| {
                timed(samples, &row("owners"), iters, || {
                    black_box(ring.owners(black_box(next()), 1).next());
                })
            })
        });
        group.bench_function(BenchmarkId::new("maglev", n), |b| {
            b.iter_custom(|iters| {
                timed(samples, &row("maglev"), iters, || {
                    black_box(maglev.get(&black_box(next())).copied());
                })
            })
        });
    }
    group.finish();
}

/// Median ns per lookup of `row` in this run, if criterion measured it.
fn median(samples: &Samples, row: &str) -> Option<f64> {
    let mut ns = samples.borrow().get(row)?.clone();
    ns.sort_by(f64::total_cmp);
    Some(ns[ns.len() / 2])
}

fn main() {
    let samples = Samples::default();
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion, &samples);
    criterion.final_summary();
    if samples.borrow().is_empty() {
        return;
    }
    println!("\nratio to Maglev at the same N (same run, {MODELS} model hashes):");
    for n in SIZES {
        let Some(maglev) = median(&samples, &format!("maglev/{n}")) else {
            continue;
        };
        for name in ["candidates", "owners"] {
            let row = format!("{name}/{n}");
            if let Some(ns) = median(&samples, &row) {
                println!("  {row:<16} {ns:>6.2} ns  {:>5.2}x", ns / maglev);
            }
        }
    }
}
