//! The hedge delay: a latency percentile per model over a rotating window,
//! read and fed without a lock.
//!
//! Each tracked model has a window of two lock-free log histograms (the
//! crate's, four buckets per power of two, about ±12%), each holding half
//! of the window: samples go to the current half; when a new half starts,
//! the older one is cleared and takes the new samples, so the percentile
//! reads the last half-window to whole window. The percentile (the upper
//! edge of its bucket: at least the true value, at most 25% above) is computed
//! at most every [`REFRESH_MS`] and cached in an atomic: the request path
//! reads one atomic, never walks buckets. The first `max_models` models
//! seen get a window each (found by open addressing on the model ID's
//! carried hash); others share one.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::HedgePolicy;
use crate::histogram::{quantile_upper_micros, Counts, LatencyHistogram, BUCKETS};

/// How often a window's percentile is recomputed at most, in ms.
pub(crate) const REFRESH_MS: u64 = 100;

/// The cached delay when a window has too few samples.
const NOT_ENOUGH: u64 = u64::MAX;

/// A window's place: an index into the tracked windows, or the shared one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    Tracked(u32),
    Shared,
}

/// One rotating window of latency samples and its cached percentile.
#[derive(Debug)]
struct Window {
    halves: [LatencyHistogram; 2],
    /// The half-window epoch the current half holds (ms since base ÷ half).
    epoch: AtomicU64,
    /// The cached delay in µs, or [`NOT_ENOUGH`].
    delay_us: AtomicU64,
    /// When (ms since base) the cached delay is stale; 0 forces a refresh.
    refresh_at: AtomicU64,
}

impl Window {
    fn new() -> Self {
        Self {
            halves: [LatencyHistogram::new(), LatencyHistogram::new()],
            epoch: AtomicU64::new(0),
            delay_us: AtomicU64::new(NOT_ENOUGH),
            refresh_at: AtomicU64::new(0),
        }
    }

    /// Moves the window to `epoch`: the half that held samples two
    /// half-windows ago is cleared (both when the window was idle longer).
    fn rotate(&self, epoch: u64) {
        let seen = self.epoch.load(Ordering::Acquire);
        if epoch <= seen
            || self
                .epoch
                .compare_exchange(seen, epoch, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return;
        }
        if epoch - seen >= 2 {
            self.halves[0].clear();
            self.halves[1].clear();
        } else {
            self.halves[(epoch % 2) as usize].clear();
        }
        self.refresh_at.store(0, Ordering::Release);
    }
}

/// Slot of the open-addressing table: a model hash (0: free) and its
/// window's index + 1 (0: being assigned; `u32::MAX`: none left).
#[derive(Debug, Default)]
struct Key {
    hash: AtomicU64,
    index: AtomicU32,
}

/// The delays of every model; see the [module docs](self).
#[derive(Debug)]
pub(crate) struct Delays {
    basis_points: u64,
    median_factor: f64,
    min_samples: u64,
    floor: Duration,
    ceiling: Duration,
    half_ms: u64,
    base: Instant,
    keys: Box<[Key]>,
    windows: Box<[Window]>,
    next: AtomicUsize,
    shared: Window,
}

impl Delays {
    pub(crate) fn new(policy: &HedgePolicy, now: Instant) -> Self {
        let models = policy.max_models.max(1);
        let slots = (models * 2).next_power_of_two();
        let half = u64::try_from(policy.window.as_millis() / 2).unwrap_or(u64::MAX);
        Self {
            basis_points: (policy.percentile * 10_000.0).round() as u64,
            median_factor: policy.median_factor,
            min_samples: policy.min_samples,
            floor: policy.floor,
            ceiling: policy.ceiling,
            half_ms: half.max(1),
            base: now,
            keys: (0..slots).map(|_| Key::default()).collect(),
            windows: (0..models).map(|_| Window::new()).collect(),
            next: AtomicUsize::new(0),
            shared: Window::new(),
        }
    }

    fn ms(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.base).as_millis()).unwrap_or(u64::MAX)
    }

    fn window(&self, place: Place) -> &Window {
        match place {
            Place::Tracked(i) => self.windows.get(i as usize).unwrap_or(&self.shared),
            Place::Shared => &self.shared,
        }
    }

    /// The window of the model whose ID hashes to `hash` (`None`: no model
    /// known), assigning a free one to a model seen for the first time.
    pub(crate) fn place(&self, hash: Option<u64>) -> Place {
        let Some(hash) = hash else {
            return Place::Shared;
        };
        let hash = hash.max(1);
        let mask = self.keys.len() - 1;
        let mut at = (hash as usize) & mask;
        for _ in 0..self.keys.len() {
            let key = &self.keys[at];
            let mut seen = key.hash.load(Ordering::Acquire);
            if seen == 0 {
                if self.next.load(Ordering::Relaxed) >= self.windows.len() {
                    return Place::Shared;
                }
                match key
                    .hash
                    .compare_exchange(0, hash, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => {
                        let i = self.next.fetch_add(1, Ordering::Relaxed);
                        let index = if i < self.windows.len() {
                            i as u32 + 1
                        } else {
                            u32::MAX
                        };
                        key.index.store(index, Ordering::Release);
                        seen = hash;
                    }
                    Err(other) => seen = other,
                }
            }
            if seen == hash {
                return match key.index.load(Ordering::Acquire) {
                    0 | u32::MAX => Place::Shared,
                    index => Place::Tracked(index - 1),
                };
            }
            at = (at + 1) & mask;
        }
        Place::Shared
    }

    /// Models with a window of their own: at most `max_models`.
    pub(crate) fn tracked(&self) -> usize {
        self.next.load(Ordering::Relaxed).min(self.windows.len())
    }

    /// The window of a model already seen (`None`: not seen, and a window
    /// is free for it), assigning nothing.
    pub(crate) fn find(&self, hash: u64) -> Option<Place> {
        let hash = hash.max(1);
        let mask = self.keys.len() - 1;
        let mut at = (hash as usize) & mask;
        for _ in 0..self.keys.len() {
            let key = &self.keys[at];
            match key.hash.load(Ordering::Acquire) {
                0 if self.next.load(Ordering::Relaxed) < self.windows.len() => return None,
                0 => return Some(Place::Shared),
                seen if seen == hash => {
                    return Some(match key.index.load(Ordering::Acquire) {
                        0 | u32::MAX => Place::Shared,
                        index => Place::Tracked(index - 1),
                    })
                }
                _ => at = (at + 1) & mask,
            }
        }
        Some(Place::Shared)
    }

    /// The delay a model not seen yet would get: an empty window's.
    pub(crate) fn unseen(&self) -> Option<Duration> {
        (self.min_samples == 0).then_some(self.floor)
    }

    /// Feeds one latency: a success's, or how long a superseded attempt
    /// had run when it was dropped.
    pub(crate) fn record(&self, place: Place, latency: Duration, now: Instant) {
        let epoch = self.ms(now) / self.half_ms;
        let window = self.window(place);
        window.rotate(epoch);
        window.halves[(epoch % 2) as usize].record(latency);
    }

    /// The delay before a backup for the model at `place`: its latency
    /// percentile in the window clamped to [floor, ceiling], or `None` while
    /// it has fewer than `min_samples` samples.
    pub(crate) fn delay(&self, place: Place, now: Instant) -> Option<Duration> {
        let ms = self.ms(now);
        let window = self.window(place);
        window.rotate(ms / self.half_ms);
        let refresh_at = window.refresh_at.load(Ordering::Acquire);
        if ms >= refresh_at
            && window
                .refresh_at
                .compare_exchange(
                    refresh_at,
                    ms.saturating_add(REFRESH_MS).max(1),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
        {
            window
                .delay_us
                .store(self.compute(window), Ordering::Release);
        }
        match window.delay_us.load(Ordering::Acquire) {
            NOT_ENOUGH => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    fn compute(&self, window: &Window) -> u64 {
        let mut counts: Counts = [0; BUCKETS];
        window.halves[0].add_to(&mut counts);
        window.halves[1].add_to(&mut counts);
        let total: u64 = counts.iter().sum();
        if total < self.min_samples {
            return NOT_ENOUGH;
        }
        // The bucket's upper edge: at least the percentile, so that a model
        // whose latency barely varies is not hedged on every request.
        let percentile = quantile_upper_micros(&counts, total, self.basis_points).unwrap_or(0.0);
        let median = quantile_upper_micros(&counts, total, 5_000).unwrap_or(0.0);
        let micros = percentile.min(median * self.median_factor);
        let delay = Duration::from_micros(micros as u64).clamp(self.floor, self.ceiling);
        u64::try_from(delay.as_micros()).unwrap_or(NOT_ENOUGH - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delays(
        build: impl FnOnce(super::super::HedgePolicyBuilder) -> super::super::HedgePolicyBuilder,
    ) -> (Delays, Instant) {
        let policy = build(HedgePolicy::builder()).build().unwrap();
        let now = Instant::now();
        (Delays::new(&policy, now), now)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn p95_per_model_after_the_minimum_of_samples() {
        let (d, now) = delays(|b| b.min_samples(20).median_factor(1_000.0));
        let fast = d.place(Some(11));
        let slow = d.place(Some(22));
        assert_ne!(fast, slow);
        assert!(matches!(fast, Place::Tracked(_)));
        for i in 0..19 {
            d.record(fast, ms(10 + i % 2), now);
        }
        assert_eq!(d.delay(fast, now), None, "19 samples are too few");
        // 100 samples: 94 at 10 ms, 6 at 200 ms: p95 is 200 ms.
        let later = now + ms(REFRESH_MS);
        for i in 0..81 {
            d.record(fast, ms(if i < 6 { 200 } else { 10 }), later);
        }
        let p95 = d.delay(fast, later).unwrap();
        assert!((ms(200)..=ms(230)).contains(&p95), "{p95:?}");
        // The other model has its own window.
        for _ in 0..20 {
            d.record(slow, ms(40), later);
        }
        let p95 = d.delay(slow, later).unwrap();
        assert!((ms(40)..=ms(50)).contains(&p95), "{p95:?}");
        // The same hash finds the same window; finding assigns none.
        assert_eq!(d.place(Some(11)), fast);
        assert_eq!(d.find(11), Some(fast));
        assert_eq!(d.find(33), None);
        assert_eq!(d.find(33), None, "still not seen");
    }

    #[test]
    fn a_slow_mode_over_five_percent_is_cut_at_a_multiple_of_the_median() {
        let (d, now) = delays(|b| b.min_samples(1));
        let p = d.place(Some(3));
        // 12% of the model's requests 10x slower: its p95 is slow.
        for i in 0..100 {
            d.record(p, ms(if i < 12 { 230 } else { 23 }), now);
        }
        let delay = d.delay(p, now).unwrap();
        assert!(
            (ms(46)..=ms(50)).contains(&delay),
            "2 x the median: {delay:?}"
        );
        let (d, now) = delays(|b| b.min_samples(1).median_factor(1_000.0));
        let p = d.place(Some(3));
        for i in 0..100 {
            d.record(p, ms(if i < 12 { 230 } else { 23 }), now);
        }
        assert!(d.delay(p, now).unwrap() > ms(230), "uncapped: the p95");
    }

    #[test]
    fn floor_and_ceiling_clamp() {
        let (d, now) = delays(|b| b.min_samples(1).floor(ms(5)).ceiling(ms(50)));
        let a = d.place(Some(1));
        let b = d.place(Some(2));
        d.record(a, Duration::from_micros(100), now);
        d.record(b, Duration::from_secs(3), now);
        assert_eq!(d.delay(a, now), Some(ms(5)));
        assert_eq!(d.delay(b, now), Some(ms(50)));
    }

    #[test]
    fn zero_minimum_starts_at_the_floor() {
        let (d, now) = delays(|b| b.min_samples(0).floor(ms(7)));
        assert_eq!(d.delay(d.place(None), now), Some(ms(7)));
    }

    #[test]
    fn the_window_rotates_out_old_samples() {
        // 10 s window, halves of 5 s.
        let (d, now) = delays(|b| {
            b.min_samples(10)
                .window(Duration::from_secs(10))
                .median_factor(1_000.0)
        });
        let p = d.place(Some(5));
        for _ in 0..10 {
            d.record(p, ms(300), now);
        }
        assert!(d.delay(p, now).unwrap() > ms(250));
        // In the next half both halves count: new fast samples do not yet
        // pull the p95 down.
        let t1 = now + Duration::from_secs(5);
        for _ in 0..10 {
            d.record(p, ms(10), t1);
        }
        assert!(d.delay(p, t1).unwrap() > ms(250));
        // One more half: the 300 ms half is cleared.
        let t2 = now + Duration::from_secs(10);
        for _ in 0..10 {
            d.record(p, ms(10), t2);
        }
        let p95 = d.delay(p, t2).unwrap();
        assert!(p95 < ms(15), "{p95:?}");
        // Idle for a whole window: nothing left, below the minimum again.
        assert_eq!(d.delay(p, now + Duration::from_secs(30)), None);
    }

    #[test]
    fn the_cached_delay_refreshes_at_most_every_period() {
        let (d, now) = delays(|b| b.min_samples(1));
        let p = d.place(Some(9));
        d.record(p, ms(20), now);
        let first = d.delay(p, now).unwrap();
        for _ in 0..100 {
            d.record(p, ms(400), now);
        }
        assert_eq!(d.delay(p, now), Some(first), "cached within the period");
        let later = now + ms(REFRESH_MS);
        assert!(d.delay(p, later).unwrap() > ms(300));
    }

    #[test]
    fn models_past_the_bound_share_one_window() {
        let (d, now) = delays(|b| b.max_models(2).min_samples(1));
        let a = d.place(Some(100));
        let b = d.place(Some(200));
        let c = d.place(Some(300));
        let e = d.place(Some(400));
        assert!(matches!(a, Place::Tracked(_)) && matches!(b, Place::Tracked(_)));
        assert_eq!((c, e), (Place::Shared, Place::Shared));
        d.record(c, ms(80), now);
        assert!(d.delay(e, now).unwrap() > ms(70), "shared by the rest");
        assert_eq!(d.delay(a, now), None);
        // Hash 0 is a valid model hash too.
        assert_eq!(d.place(Some(0)), Place::Shared);
        assert_eq!(d.find(999), Some(Place::Shared), "no window left");
    }
}
