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
//! `maglev/1024`. After the group, a table gives each row's mean and its
//! ratio to Maglev at the same N, from criterion's estimates of this run.

use std::hash::{BuildHasher, Hasher};
use std::path::PathBuf;

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

fn bench(c: &mut Criterion) {
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

        group.bench_function(BenchmarkId::new("candidates", n), |b| {
            b.iter(|| black_box(ring.primary(black_box(next()))))
        });
        group.bench_function(BenchmarkId::new("owners", n), |b| {
            b.iter(|| black_box(ring.owners(black_box(next()), 1).next()))
        });
        group.bench_function(BenchmarkId::new("maglev", n), |b| {
            b.iter(|| black_box(maglev.get(&black_box(next())).copied()))
        });
    }
    group.finish();
}

/// Mean time of one benchmark from criterion's saved estimates, in ns.
fn mean_ns(name: &str, n: usize) -> Option<f64> {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| PathBuf::from("target"), PathBuf::from);
    let path = target
        .join("criterion")
        .join(GROUP)
        .join(name)
        .join(n.to_string())
        .join("new/estimates.json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    json["mean"]["point_estimate"].as_f64()
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
    println!("\nratio to Maglev at the same N (same run, {MODELS} model hashes):");
    for n in SIZES {
        let Some(maglev) = mean_ns("maglev", n) else {
            continue;
        };
        for name in ["candidates", "owners"] {
            if let Some(ns) = mean_ns(name, n) {
                let row = format!("{name}/{n}");
                println!("  {row:<16} {ns:>6.2} ns  {:>5.2}x", ns / maglev);
            }
        }
    }
}
