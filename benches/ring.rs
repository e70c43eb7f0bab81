//! Cost of finding a model's owners on the ring against Google's Maglev
//! lookup table, over the same backends and the same precomputed model
//! hashes, side by side in one run.
//!
//! Group `ring`, one row per lookup and N = 8, 64, 512, 1024 and 10 000
//! backends (150 vnodes, weight 1):
//!
//! * `candidates/N`: the primary owner (k = 1), `Ring::primary`;
//! * `owners/N`: the same through a walk, `ring.owners(hash, 1).next()`, as
//!   the balancer reads owners;
//! * `maglev/N`: a Maglev table's lookup of the same 64-bit hash
//!   (`ring/maglev.rs`: the `maglev` crate's table, built without the
//!   crate's N × M permutations, which take 80 GB at N = 10 000; at N ≤ 64
//!   the bench checks the two tables agree on every entry).
//!
//! Each row cycles through 4096 xxh3 model hashes, so lookups spread over
//! the tables rather than hitting one cache line; `candidates_hot/N` and
//! `maglev_hot/N` do the same over the first 512 of them, a working set
//! whose pages the TLB holds at every N (at N = 10 000 the ring's 40 MB
//! are ten times Maglev's table, and 4096 keys touch more pages than a
//! TLB maps). Maglev is the fastest
//! stable mapping we know of (one table read) but yields one owner, not an
//! order to spill along; the target is `candidates/N ≤ maglev/N` at
//! N = 1024 and 10 000. After the group, a table gives each row's median ns
//! per lookup over the samples criterion took in this run (of at least 1000
//! lookups; not criterion's `estimates.json`, which a filtered run would
//! leave from an earlier one), its ratio to Maglev at the same N, and each
//! structure's heap bytes per backend (the live heap before and after it
//! was built, by a counting global allocator).

#[path = "ring/maglev.rs"]
mod maglev_table;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use tokio::time::Instant;

use criterion::measurement::WallTime;
use criterion::{black_box, BenchmarkGroup, BenchmarkId, Criterion};
use maglev::{ConsistentHasher, Maglev as MaglevCrate};
use tower_model_balance::backend::BackendId;
use tower_model_balance::ring::{Ring, RingConfig};
use tower_model_balance::route::ModelId;
use tower_model_balance_test_support::live_heap;

use maglev_table::Maglev;

#[global_allocator]
static GLOBAL: live_heap::Counting = live_heap::Counting;

const GROUP: &str = "ring";
const SIZES: [usize; 5] = [8, 64, 512, 1024, 10_000];
const MODELS: usize = 4096;
/// Model hashes of the `_hot` rows: the first of the [`MODELS`].
const HOT: usize = 512;
/// Largest N at which the bench checks its Maglev table against the crate's
/// (whose build takes N × M words).
const CHECKED_UP_TO: usize = 64;

/// Hands the `maglev` crate the precomputed hash as it is. Maglev writes a seed, then
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

/// Heap bytes per backend of each structure, by `ring/N` or `maglev/N`.
type Memory = BTreeMap<String, f64>;

/// `build()`'s result and the live heap it added, per backend of `n`.
fn measured<T>(n: usize, build: impl FnOnce() -> T) -> (T, f64) {
    let before = live_heap::live();
    let built = build();
    let bytes = (live_heap::live() - before) as f64;
    (built, bytes / n as f64)
}

/// Panics unless `table` agrees with the `maglev` crate's over the same
/// node hashes on every entry.
fn check_against_crate(table: &Maglev, nodes: &[u64]) {
    let theirs = MaglevCrate::with_hasher(nodes.iter().copied(), Identity);
    assert_eq!(theirs.capacity(), table.entries().len(), "table size");
    for (key, &ours) in table.entries().iter().enumerate() {
        let expected = theirs.get(&(key as u64)).copied();
        assert_eq!(expected, Some(nodes[ours as usize]), "entry {key}");
    }
}

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

/// Benchmarks row `name/n`: `op`, one lookup, timed by [`timed`]. (A
/// generic, not a `dyn FnMut`: an indirect call would cost about as much
/// as the lookup.)
fn lookup_row(
    group: &mut BenchmarkGroup<'_, WallTime>,
    samples: &Samples,
    name: &str,
    n: usize,
    mut op: impl FnMut(),
) {
    let row = format!("{name}/{n}");
    group.bench_function(BenchmarkId::new(name, n), |b| {
        b.iter_custom(|iters| timed(samples, &row, iters, &mut op))
    });
}

fn bench(c: &mut Criterion, samples: &Samples, memory: &mut Memory) {
    let hashes: Vec<u64> = (0..MODELS)
        .map(|i| ModelId::new(&format!("model-{i}")).unwrap().hash64())
        .collect();
    // Both lengths are powers of two: the next index is a mask, not a
    // division (which would cost more than either lookup).
    let cycle = |len: usize| {
        assert!(len.is_power_of_two() && len <= hashes.len());
        let hashes = hashes[..len].to_vec();
        let mut i = 0;
        move || {
            i = (i + 1) & (len - 1);
            hashes[i]
        }
    };
    let (mut next, mut next_hot) = (cycle(MODELS), cycle(HOT));
    let mut group = c.benchmark_group(GROUP);
    for n in SIZES {
        let members = (0..n).map(|i| (backend(i), 1));
        let (ring, bytes) = measured(n, || Ring::build(&RingConfig::default(), members).unwrap());
        memory.insert(format!("ring/{n}"), bytes);
        // Maglev's nodes are the xxh3 hashes of the same backend IDs.
        let nodes: Vec<u64> = (0..n)
            .map(|i| xxhash_rust::xxh3::xxh3_64(backend(i).as_bytes()))
            .collect();
        let (maglev, bytes) = measured(n, || Maglev::new(&nodes));
        memory.insert(format!("maglev/{n}"), bytes);
        if n <= CHECKED_UP_TO {
            check_against_crate(&maglev, &nodes);
        }

        lookup_row(&mut group, samples, "candidates", n, || {
            black_box(ring.primary(black_box(next())));
        });
        lookup_row(&mut group, samples, "owners", n, || {
            black_box(ring.owners(black_box(next()), 1).next());
        });
        lookup_row(&mut group, samples, "maglev", n, || {
            black_box(maglev.get(black_box(next())));
        });
        lookup_row(&mut group, samples, "candidates_hot", n, || {
            black_box(ring.primary(black_box(next_hot())));
        });
        lookup_row(&mut group, samples, "maglev_hot", n, || {
            black_box(maglev.get(black_box(next_hot())));
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

/// N at which `candidates/N ≤ maglev/N` is the target.
const TARGET_SIZES: [usize; 2] = [1024, 10_000];

fn main() {
    let samples = Samples::default();
    let mut memory = Memory::new();
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion, &samples, &mut memory);
    criterion.final_summary();
    if samples.borrow().is_empty() {
        return;
    }
    println!("\nratio to Maglev at the same N (same run; {MODELS} model hashes, _hot {HOT}):");
    for n in SIZES {
        let ns = |kind: &str| median(&samples, &format!("{kind}/{n}"));
        for (maglev, rows) in [
            ("maglev", &["candidates", "owners"][..]),
            ("maglev_hot", &["candidates_hot"][..]),
        ] {
            let Some(base) = ns(maglev) else {
                continue;
            };
            println!("  {:<20} {base:>6.2} ns", format!("{maglev}/{n}"));
            for &name in rows {
                let Some(lookup) = ns(name) else {
                    continue;
                };
                let ratio = lookup / base;
                let verdict = match name == "candidates" && TARGET_SIZES.contains(&n) {
                    true if ratio <= 1.0 => "  (≤ 1: ok)",
                    true => "  (≤ 1: MISS)",
                    false => "",
                };
                let row = format!("{name}/{n}");
                println!("  {row:<20} {lookup:>6.2} ns  {ratio:>5.2}x{verdict}");
            }
        }
    }
    println!("\nheap bytes per backend (150 vnodes a backend):");
    for n in SIZES {
        let get = |kind: &str| memory.get(&format!("{kind}/{n}")).copied();
        if let (Some(ring), Some(maglev)) = (get("ring"), get("maglev")) {
            println!("  N = {n:<6} ring {ring:>8.0} B   maglev {maglev:>8.0} B");
        }
    }
}
