//! How much of the recent inference traffic each model draws (pure logic
//! over atomics: no lock, no allocation per request).
//!
//! Requests are counted in a fixed table of buckets indexed by the model
//! ID's carried hash (models that share a bucket share a count, which can
//! only overestimate a model's demand). When the total reaches
//! [`WINDOW`], every count is halved, so the shares follow recent traffic
//! with a half-life of about `WINDOW / 2` requests.

use std::sync::atomic::{AtomicU32, Ordering};

/// Buckets in the table (a power of two).
const BUCKETS: usize = 4096;
/// Total count at which every count is halved.
pub(crate) const WINDOW: u32 = 8192;
/// Requests counted before shares are trusted; until then every model gets
/// the minimum number of owners.
const WARM_UP: u32 = 256;

#[derive(Debug)]
pub(crate) struct Demand {
    buckets: Box<[AtomicU32]>,
    total: AtomicU32,
}

impl Demand {
    pub(crate) fn new() -> Self {
        Self {
            buckets: (0..BUCKETS).map(|_| AtomicU32::new(0)).collect(),
            total: AtomicU32::new(0),
        }
    }

    /// Counts one request for the model with hash `key` and returns the
    /// model's share of recent requests, in [0, 1]; `None` while warming up.
    pub(crate) fn record(&self, key: u64) -> Option<f64> {
        let count = self.buckets[key as usize % BUCKETS].fetch_add(1, Ordering::Relaxed) + 1;
        let total = self.total.fetch_add(1, Ordering::Relaxed) + 1;
        if total >= WINDOW
            && self
                .total
                .compare_exchange(total, total / 2, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            for bucket in self.buckets.iter() {
                let _ = bucket.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| Some(c / 2));
            }
        }
        (total >= WARM_UP).then(|| (f64::from(count) / f64::from(total)).min(1.0))
    }
}

/// Owners a model needs: enough that none carries more than its bounded
/// share, `ceil(share × n / c)`, within `min ..= max`.
pub(crate) fn owners_needed(share: Option<f64>, n: usize, c: f64, min: usize, max: usize) -> usize {
    let needed = share.map_or(min, |s| (s * n as f64 / c).ceil() as usize);
    needed.clamp(min, max.max(min))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_follow_traffic_and_decay() {
        let d = Demand::new();
        for i in 0..WARM_UP - 1 {
            assert_eq!(d.record(u64::from(i % 4)), None, "warming up");
        }
        // From here: model 0 takes 3 requests in 4.
        let mut share = None;
        for i in 0..4 * WINDOW {
            let key = if i % 4 == 3 { 1 } else { 0 };
            let s = d.record(key);
            if key == 0 {
                share = s;
            }
        }
        let share = share.unwrap();
        assert!((0.70..0.80).contains(&share), "{share}");
        assert!(d.total.load(Ordering::Relaxed) < WINDOW, "halved");
    }

    #[test]
    fn owners_follow_share() {
        // 8 backends, c = 1.25: one owner carries up to 15.6% of traffic.
        assert_eq!(owners_needed(None, 8, 1.25, 1, 2), 1);
        assert_eq!(owners_needed(Some(0.10), 8, 1.25, 1, 2), 1);
        assert_eq!(owners_needed(Some(0.28), 8, 1.25, 1, 2), 2);
        assert_eq!(owners_needed(Some(0.28), 8, 1.25, 1, 4), 2);
        assert_eq!(owners_needed(Some(0.90), 8, 1.25, 1, 4), 4);
        assert_eq!(
            owners_needed(Some(0.01), 8, 1.25, 2, 4),
            2,
            "the minimum holds"
        );
    }
}
