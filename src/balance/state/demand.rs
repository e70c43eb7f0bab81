//! How much of the recent inference traffic each model draws (pure logic
//! over atomics: no lock, no allocation per request).
//!
//! Requests are counted in a fixed table of buckets indexed by the model
//! ID's carried hash (models that share a bucket share a count, which can
//! only overestimate a model's demand). When the total reaches
//! [`WINDOW`], every count is halved, so the shares follow recent traffic
//! with a half-life of about `WINDOW / 2` requests.
//!
//! Each bucket also remembers its model's current number of owners `k`, so
//! that `k` moves with hysteresis: it grows as soon as the share needs more
//! owners, and shrinks one at a time only once the share has fallen
//! [`HYSTERESIS`] below what one owner fewer could carry — a model whose
//! share hovers around a boundary keeps its owners (and their warm copies).
//!
//! A share of *requests* is not a share of the fleet's busy time: a 16 GB
//! model's request can cost 2.4 × an adapter's, and owners sized by its
//! request share run over capacity. [`Work`] keeps, per bucket, a moving
//! average of the latency of the model's warm, successful requests, and
//! one over every model's; a model's share is weighted by the ratio
//! (within [`MIN_WORK`] ..= [`MAX_WORK`]), so that `k` follows the share
//! of work the model brings.

use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::balance::config::fields::BalanceConfig;

/// Buckets in the table (a power of two).
const BUCKETS: usize = 4096;
/// Total count at which every count is halved.
pub(crate) const WINDOW: u32 = 2048;
/// Requests counted before shares are trusted; until then every model gets
/// the minimum number of owners.
const WARM_UP: u32 = 64;
/// Sampled requests in a bucket below which its models count as without
/// demand: a few stray hits (a hash flood's IDs sharing a bucket) stay
/// below, while a model drawing 0.4% of the sampled traffic holds 4 to 8
/// (the total runs between `WINDOW / 2` and `WINDOW`).
pub(crate) const UNSEEN_BELOW: u32 = 4;
/// How far (in owners' worth of load) a share must fall below a boundary
/// before a model gives an owner back.
pub(crate) const HYSTERESIS: f64 = 0.25;

#[derive(Debug)]
pub(crate) struct Demand {
    buckets: Box<[AtomicU32]>,
    owners: Box<[AtomicU16]>,
    /// The model hash last counted in each bucket (0: none yet); prefix
    /// groups are counted without one.
    keys: Box<[AtomicU64]>,
    total: AtomicU32,
}

/// Bounds on a model's owners and what one owner carries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// Backends in the fleet (those the ring in force stands for).
    pub(crate) n: f64,
    /// The load one owner carries from the model, over the mean load per
    /// backend ([`BalanceConfig::owner_load`]: by default the bounded-load
    /// factor `c`).
    pub(crate) load: f64,
    pub(crate) min: usize,
    pub(crate) max: usize,
}

/// Whether sizing a model's owners counts the request in its demand.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Tally {
    /// Counted (the clone samples it), weighted by `work`, the model's
    /// work per request over the mean (see [`Work::weight`]; the mean is
    /// 1).
    Count { work: f64 },
    /// Only read: the owners the model has now.
    Peek,
}

impl Bounds {
    /// `k` within `min ..= max`.
    #[inline]
    pub(crate) fn clamp(&self, k: usize) -> usize {
        k.clamp(self.min, self.max.max(self.min))
    }

    /// The owners a model with `share` of the recent work (its share of
    /// requests × its work per request over the mean) needs, from
    /// `current` (within the bounds): more as soon as the share needs
    /// them, one fewer once it fell [`HYSTERESIS`] below what one fewer
    /// carries.
    #[inline]
    pub(crate) fn next(&self, share: f64, current: usize) -> usize {
        let (min, max) = (self.min, self.max.max(self.min));
        let load = share * self.n / self.load;
        if load > current as f64 {
            (load.ceil() as usize).min(max)
        } else if current > min && load <= (current - 1) as f64 - HYSTERESIS {
            current - 1
        } else {
            current
        }
    }

    /// The bounds `config` sets, over `n` backends.
    pub(crate) fn of(config: &BalanceConfig, n: f64) -> Self {
        Self {
            n,
            load: config.owner_load(),
            min: config.min_owners,
            max: config.owners,
        }
    }
}

impl Demand {
    pub(crate) fn new() -> Self {
        Self {
            buckets: (0..BUCKETS).map(|_| AtomicU32::new(0)).collect(),
            owners: (0..BUCKETS).map(|_| AtomicU16::new(0)).collect(),
            keys: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            total: AtomicU32::new(0),
        }
    }

    /// Counts one request for the model with hash `key` under
    /// [`Tally::Count`] and returns how many owners it has now, within
    /// `bounds` (see the module docs).
    pub(crate) fn owners(&self, key: u64, tally: Tally, bounds: Bounds) -> usize {
        let share = match tally {
            Tally::Count { work } => self.record(key).map(|share| share * work),
            Tally::Peek => None,
        };
        let slot = &self.owners[key as usize % BUCKETS];
        let current = bounds.clamp(usize::from(slot.load(Ordering::Relaxed)));
        let Some(share) = share else { return current };
        let next = bounds.next(share, current);
        if next != current {
            slot.store(next.min(usize::from(u16::MAX)) as u16, Ordering::Relaxed);
        }
        next
    }

    /// Names the model with hash `key` as its bucket's, for
    /// [`Demand::models`] (a model's counted requests, not a prefix
    /// group's). A load and, when the name changes, a store.
    #[inline]
    pub(crate) fn name(&self, key: u64) {
        let slot = &self.keys[key as usize % BUCKETS];
        if slot.load(Ordering::Relaxed) != key {
            slot.store(key, Ordering::Relaxed);
        }
    }

    /// The named models with demand (at least [`UNSEEN_BELOW`] recent
    /// sampled requests in their bucket), each with its bucket's share of
    /// recent requests; none while the table warms up. Allocates: off the
    /// request path.
    pub(crate) fn models(&self) -> Vec<(u64, f64)> {
        let total = self.total.load(Ordering::Relaxed);
        if total < WARM_UP {
            return Vec::new();
        }
        self.buckets
            .iter()
            .zip(self.keys.iter())
            .filter_map(|(count, key)| {
                let (count, key) = (count.load(Ordering::Relaxed), key.load(Ordering::Relaxed));
                (count >= UNSEEN_BELOW && key != 0).then(|| {
                    let share = (f64::from(count) / f64::from(total)).min(1.0);
                    (key, share)
                })
            })
            .collect()
    }

    /// Counts one request for the model with hash `key` and returns the
    /// model's share of recent requests, in [0, 1]; `None` while warming up.
    /// Whether fewer than [`UNSEEN_BELOW`] recent sampled requests counted
    /// in the model's bucket (shared with the models that hash to it): a
    /// model without demand worth keeping warm.
    /// Always false while the table warms up (its first [`WARM_UP`]
    /// sampled requests), when every model is unseen.
    #[inline]
    pub(crate) fn unseen(&self, key: u64) -> bool {
        self.total.load(Ordering::Relaxed) >= WARM_UP
            && self.buckets[key as usize % BUCKETS].load(Ordering::Relaxed) < UNSEEN_BELOW
    }

    pub(crate) fn record(&self, key: u64) -> Option<f64> {
        let count = self.buckets[key as usize % BUCKETS].fetch_add(1, Ordering::Relaxed) + 1;
        let total = self.total.fetch_add(1, Ordering::Relaxed) + 1;
        if total >= WINDOW
            && self
                .total
                .compare_exchange(total, total / 2, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            // A load and, where there is a count, a store — not a
            // read-modify-write per bucket: a count racing the halving may
            // be lost, which an estimate of shares can afford.
            for bucket in self.buckets.iter() {
                let c = bucket.load(Ordering::Relaxed);
                if c != 0 {
                    bucket.store(c / 2, Ordering::Relaxed);
                }
            }
        }
        (total >= WARM_UP).then(|| (f64::from(count) / f64::from(total)).min(1.0))
    }
}

/// The least and the most a model's work per request is weighted, against
/// the mean: a latency average thrown far off (a queue, a stall) moves a
/// model's owners by at most this factor.
pub(crate) const MIN_WORK: f64 = 0.25;
/// See [`MIN_WORK`].
pub(crate) const MAX_WORK: f64 = 4.0;
/// Weight of a new latency in the moving averages, as a shift: 1/8.
const WORK_SHIFT: u32 = 3;

/// Moving averages of the latency (µs) of warm, successful inference
/// requests: per bucket of model hashes (as [`Demand`]'s buckets) and
/// over all (pure logic over atomics: a racing update may be lost).
#[derive(Debug)]
pub(crate) struct Work {
    buckets: Box<[AtomicU32]>,
    mean: AtomicU32,
}

impl Work {
    pub(crate) fn new() -> Self {
        Self {
            buckets: (0..BUCKETS).map(|_| AtomicU32::new(0)).collect(),
            mean: AtomicU32::new(0),
        }
    }

    /// Records the latency of a warm, successful request for the model
    /// with hash `key`.
    pub(crate) fn record(&self, key: u64, latency: Duration) {
        let us = u32::try_from(latency.as_micros())
            .unwrap_or(u32::MAX)
            .max(1);
        for average in [&self.buckets[key as usize % BUCKETS], &self.mean] {
            let old = average.load(Ordering::Relaxed);
            let new = match old {
                0 => us,
                old => {
                    let (old, us) = (i64::from(old), i64::from(us));
                    (old + ((us - old) >> WORK_SHIFT)).max(1) as u32
                }
            };
            average.store(new, Ordering::Relaxed);
        }
    }

    /// The model's latency average over the mean of all, within
    /// [`MIN_WORK`] ..= [`MAX_WORK`]; 1 while either is unknown.
    pub(crate) fn weight(&self, key: u64) -> f64 {
        let model = self.buckets[key as usize % BUCKETS].load(Ordering::Relaxed);
        let mean = self.mean.load(Ordering::Relaxed);
        if model == 0 || mean == 0 {
            return 1.0;
        }
        (f64::from(model) / f64::from(mean)).clamp(MIN_WORK, MAX_WORK)
    }
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

    /// A request counted at the mean work.
    const MEAN: Tally = Tally::Count { work: 1.0 };

    fn bounds(min: usize, max: usize) -> Bounds {
        // 8 backends, c = 1.25: one owner carries up to 15.6% of traffic.
        Bounds {
            n: 8.0,
            load: 1.25,
            min,
            max,
        }
    }

    /// Feeds `d` until model 0's share of the window is about `share`.
    fn settle(d: &Demand, share: f64, b: Bounds) -> usize {
        let mut k = 0;
        for i in 0..4 * WINDOW {
            let hot = (f64::from(i % 100)) < share * 100.0;
            let key = if hot { 0 } else { 1 + u64::from(i % 7) };
            let owners = d.owners(key, MEAN, b);
            if key == 0 {
                k = owners;
            }
        }
        k
    }

    #[test]
    fn owners_follow_share_with_hysteresis() {
        let b = bounds(1, 4);
        let d = Demand::new();
        assert_eq!(d.owners(0, MEAN, b), 1, "the minimum while warming up");
        assert_eq!(settle(&d, 0.10, b), 1);
        assert_eq!(settle(&d, 0.28, b), 2, "0.28 × 8 / 1.25 = 1.8");
        assert_eq!(settle(&d, 0.90, b), 4, "capped at the maximum");
        assert_eq!(settle(&d, 0.20, b), 2, "a cooling model gives owners back");
        // 0.14 needs one owner (1.12 ≤ 1 would need ≤ 0.156) but is not
        // 25% below the boundary: k stays at 2 ...
        assert_eq!(settle(&d, 0.14, b), 2, "no flapping near a boundary");
        // ... until the share falls a quarter of an owner's load below it.
        assert_eq!(settle(&d, 0.10, b), 1);
        assert_eq!(
            settle(&Demand::new(), 0.01, bounds(2, 4)),
            2,
            "the minimum holds"
        );
    }

    #[test]
    fn owners_are_sized_to_carry_the_configured_owner_load() {
        let config =
            |b: crate::balance::config::builder::BalanceConfigBuilder| b.owners(8).build().unwrap();
        let default = config(BalanceConfig::builder());
        let lower = config(BalanceConfig::builder().owner_load(0.5));
        let tight = config(BalanceConfig::builder().load_factor(1.1));
        let (a, b, t) = (
            Bounds::of(&default, 8.0),
            Bounds::of(&lower, 8.0),
            Bounds::of(&tight, 8.0),
        );
        assert_eq!((a.load, b.load, t.load), (1.25, 0.5, 1.1), "c unless set");
        let (da, db) = (Demand::new(), Demand::new());
        // 10% of the traffic over 8 backends is 0.8 × a backend's mean
        // load: one owner at 1.25 each, two at 0.5 each.
        assert_eq!(settle(&da, 0.10, a), 1);
        assert_eq!(settle(&db, 0.10, b), 2);
        // 28%, 2.24 × the mean: 1.8 owners' worth at 1.25, 4.5 at 0.5.
        assert_eq!(settle(&da, 0.28, a), 2);
        assert_eq!(settle(&db, 0.28, b), 5);
        assert_eq!(settle(&db, 0.90, b), 8, "capped at owners");
    }

    #[test]
    fn work_weights_a_slow_model_by_its_latency_over_the_mean() {
        let w = Work::new();
        assert_eq!(w.weight(1), 1.0, "unknown");
        let ms = Duration::from_millis;
        // Three adapter requests (110 ms) for each large model's (260 ms).
        for _ in 0..400 {
            for _ in 0..3 {
                w.record(1, ms(110));
            }
            w.record(2, ms(260));
        }
        let (slow, fast) = (w.weight(2), w.weight(1));
        assert!((1.4..2.0).contains(&slow), "{slow}");
        assert!((0.6..1.0).contains(&fast), "{fast}");
        w.record(3, Duration::from_secs(3600));
        assert_eq!(w.weight(3), MAX_WORK, "clamped");
        w.record(4, Duration::ZERO);
        assert_eq!(w.weight(4), MIN_WORK, "clamped");
    }

    #[test]
    fn owners_follow_the_share_of_work() {
        let b = bounds(1, 4);
        let (d, heavy) = (Demand::new(), Demand::new());
        let mut k = (0, 0);
        for i in 0..4 * WINDOW {
            let key = if i % 10 == 0 { 0 } else { 1 + u64::from(i % 7) };
            let (light, weighted) = (
                d.owners(key, MEAN, b),
                heavy.owners(key, Tally::Count { work: 2.0 }, b),
            );
            if key == 0 {
                k = (light, weighted);
            }
        }
        // 10% of requests: 0.8 of an owner's load; at twice the work, 1.6.
        assert_eq!(k, (1, 2));
    }
}
