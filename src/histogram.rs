//! A lock-free latency histogram: log-scaled buckets of atomic counters,
//! four per power of two (about ±12%), from 1 µs to about 71 minutes. Health
//! takes one per evaluation interval; the hedge's delay sums two halves of a
//! rotating window.

// Health's evaluation uses it with the balancer; the hedge, its own parts.
#![cfg_attr(not(all(feature = "balance", feature = "hedge")), allow(dead_code))]

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Sub-buckets per power of two.
const SUB_BITS: u32 = 2;
const SUBS: usize = 1 << SUB_BITS;
/// Powers of two covered: 1 µs ..= 2^32 µs.
const OCTAVES: usize = 33;
pub(crate) const BUCKETS: usize = OCTAVES * SUBS;

/// Latency samples of one interval, recorded without a lock.
#[derive(Debug)]
pub(crate) struct LatencyHistogram {
    buckets: [AtomicU32; BUCKETS],
}

/// What [`LatencyHistogram::take`] read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Taken {
    /// Samples recorded.
    pub(crate) count: u64,
    /// Their 99th percentile in ms (the middle of its bucket), if any.
    pub(crate) p99_ms: Option<f64>,
}

impl LatencyHistogram {
    pub(crate) fn new() -> Self {
        Self {
            buckets: std::array::from_fn(|_| AtomicU32::new(0)),
        }
    }

    /// Counts one sample (one read-modify-write).
    pub(crate) fn record(&self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.buckets[index(micros)].fetch_add(1, Ordering::Relaxed);
    }

    /// Reads and clears the samples recorded since the last take.
    pub(crate) fn take(&self) -> Taken {
        let mut counts = [0u64; BUCKETS];
        for (count, bucket) in counts.iter_mut().zip(&self.buckets) {
            // Most buckets are empty: a load, and a swap only where there
            // is a count (a sample landing after the load is the next
            // take's, as one landing after a swap would be).
            if bucket.load(Ordering::Relaxed) != 0 {
                *count = u64::from(bucket.swap(0, Ordering::Relaxed));
            }
        }
        let count: u64 = counts.iter().sum();
        Taken {
            count,
            p99_ms: quantile_micros(&counts, count, 9_900).map(|us| us / 1_000.0),
        }
    }

    /// Adds the counts recorded so far to `counts`, clearing nothing.
    pub(crate) fn add_to(&self, counts: &mut Counts) {
        for (count, bucket) in counts.iter_mut().zip(&self.buckets) {
            *count += u64::from(bucket.load(Ordering::Relaxed));
        }
    }

    /// Clears every bucket.
    pub(crate) fn clear(&self) {
        for bucket in &self.buckets {
            bucket.store(0, Ordering::Relaxed);
        }
    }
}

/// Counts per bucket, summed from one or more histograms.
pub(crate) type Counts = [u64; BUCKETS];

/// The quantile `basis_points` ÷ 10 000 (1 ..= 10 000) of `total` samples
/// counted in `counts`, in µs (the middle of the smallest bucket with at
/// least that share of the samples at or below it); `None` without samples.
pub(crate) fn quantile_micros(counts: &Counts, total: u64, basis_points: u64) -> Option<f64> {
    quantile_bucket(counts, total, basis_points).map(middle_micros)
}

/// As [`quantile_micros`], the upper edge of the bucket instead of its
/// middle: a value at least the quantile, at most a quarter above it.
pub(crate) fn quantile_upper_micros(counts: &Counts, total: u64, basis_points: u64) -> Option<f64> {
    quantile_bucket(counts, total, basis_points).map(upper_micros)
}

/// The smallest bucket with at least `basis_points` ÷ 10 000 of the
/// samples at or below it.
fn quantile_bucket(counts: &Counts, total: u64, basis_points: u64) -> Option<usize> {
    if total == 0 {
        return None;
    }
    let rank = total
        .saturating_mul(basis_points)
        .div_ceil(10_000)
        .clamp(1, total);
    let mut seen = 0;
    for (i, &c) in counts.iter().enumerate() {
        seen += c;
        if seen >= rank {
            return Some(i);
        }
    }
    Some(BUCKETS - 1)
}

/// The bucket of a sample of `micros`.
fn index(micros: u64) -> usize {
    let v = micros.max(1);
    let octave = 63 - v.leading_zeros() as usize;
    if octave >= OCTAVES {
        return BUCKETS - 1;
    }
    let sub = if octave >= SUB_BITS as usize {
        ((v >> (octave - SUB_BITS as usize)) as usize) & (SUBS - 1)
    } else {
        ((v << (SUB_BITS as usize - octave)) as usize) & (SUBS - 1)
    };
    octave * SUBS + sub
}

/// The upper edge of bucket `i`, in µs.
fn upper_micros(i: usize) -> f64 {
    let (octave, sub) = (i / SUBS, i % SUBS);
    2f64.powi(octave as i32) * (1.0 + (sub + 1) as f64 / SUBS as f64)
}

/// The middle of bucket `i`, in µs.
fn middle_micros(i: usize) -> f64 {
    let (octave, sub) = (i / SUBS, i % SUBS);
    let low = 2f64.powi(octave as i32) * (1.0 + sub as f64 / SUBS as f64);
    let width = 2f64.powi(octave as i32) / SUBS as f64;
    low + width / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_within_an_eighth() {
        let mut last = 0;
        for micros in (1..2_000_000u64).step_by(997) {
            let i = index(micros);
            assert!(i >= last);
            last = i;
            let mid = middle_micros(i);
            let err = (mid - micros as f64).abs() / micros as f64;
            assert!(err <= 0.13, "{micros} µs → {mid} ({err})");
        }
        assert_eq!(index(0), index(1));
        assert_eq!(index(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn the_upper_edge_is_at_least_every_sample_of_its_bucket() {
        for micros in (1..2_000_000u64).step_by(991) {
            let upper = upper_micros(index(micros));
            assert!(upper >= micros as f64, "{micros} µs → {upper}");
            assert!(upper <= micros as f64 * 1.26 + 1.0, "{micros} µs → {upper}");
        }
    }

    #[test]
    fn p99_of_an_interval_and_cleared_after() {
        let h = LatencyHistogram::new();
        for _ in 0..990 {
            h.record(Duration::from_millis(10));
        }
        for _ in 0..10 {
            h.record(Duration::from_millis(500));
        }
        let taken = h.take();
        assert_eq!(taken.count, 1000);
        let p99 = taken.p99_ms.unwrap();
        assert!((9.0..11.5).contains(&p99), "{p99}");
        h.record(Duration::from_millis(500));
        let p99 = h.take().p99_ms.unwrap();
        assert!((440.0..560.0).contains(&p99), "{p99}");
        assert_eq!(
            h.take(),
            Taken {
                count: 0,
                p99_ms: None
            }
        );
    }
}
