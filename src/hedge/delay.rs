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
//! reads one atomic, never walks buckets.
//!
//! `max_models` windows are kept in sets of [`WAYS`]. A model's carried
//! hash picks two sets (two-choice, as bucketized cuckoo hashing does, so
//! that few sets overflow); it gets a window of either if one is free or
//! *idle*: unused for a whole window, so its samples have all rotated out
//! and nothing is lost by handing it on. A model whose two sets are held
//! by models active within the window shares one window with the rest. So
//! the models tracked apart follow the traffic: a model that was popular
//! and went quiet gives its window to the next one. Two races are
//! allowed, both harmless: a request in flight for longer than the window
//! may add its one sample to its window's new model, and two requests
//! placing the same new model at once may take two windows (the second
//! goes idle and is handed on). A request reads at most `2 × WAYS` hashes,
//! held apart from the windows in one array.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::config::HedgeConfig;
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

/// Windows per set: a model can be tracked in any of the `WAYS` windows
/// of either of the two sets its hash picks.
pub(crate) const WAYS: usize = 8;

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

    /// Whether the window's samples have all rotated out by `epoch`: it
    /// was last used two half-windows or more before.
    fn idle_at(&self, epoch: u64) -> bool {
        self.epoch.load(Ordering::Acquire).saturating_add(2) <= epoch
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
    /// `max_models` windows, set `s` being `s × WAYS ..` (the last set
    /// may be smaller).
    windows: Box<[Window]>,
    /// The model hash each window times (never 0: hashes are stored as at
    /// least 1), or 0 while it is free.
    models: Box<[AtomicU64]>,
    sets: u64,
    shared: Window,
}

impl Delays {
    pub(crate) fn new(policy: &HedgeConfig, now: Instant) -> Self {
        let models = policy.max_models.max(1);
        let half = u64::try_from(policy.window.as_millis() / 2).unwrap_or(u64::MAX);
        Self {
            basis_points: (policy.percentile * 10_000.0).round() as u64,
            median_factor: policy.median_factor,
            min_samples: policy.min_samples,
            floor: policy.floor,
            ceiling: policy.ceiling,
            half_ms: half.max(1),
            base: now,
            windows: (0..models).map(|_| Window::new()).collect(),
            models: (0..models).map(|_| AtomicU64::new(0)).collect(),
            sets: models.div_ceil(WAYS) as u64,
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

    /// The windows of the two sets `hash` (at least 1) picks, by
    /// multiply-shift on it and on its halves swapped (the second empty
    /// when both pick the same).
    fn sets(&self, hash: u64) -> [std::ops::Range<usize>; 2] {
        let set = |h: u64| ((u128::from(h) * u128::from(self.sets)) >> 64) as usize;
        let ways = |set: usize| set * WAYS..(set * WAYS + WAYS).min(self.windows.len());
        let (first, second) = (set(hash), set(hash.rotate_left(32)));
        [
            ways(first),
            if second == first { 0..0 } else { ways(second) },
        ]
    }

    /// `hash`'s window, else `Err` with one it could take and the hash held
    /// there: free, in the set with more free windows (the less loaded of
    /// two choices); else idle at `epoch`; else none.
    fn look_up(&self, hash: u64, epoch: u64) -> Result<Place, Option<(usize, u64)>> {
        let mut free = [(0, None); 2];
        let mut idle = None;
        for (set, ways) in self.sets(hash).into_iter().enumerate() {
            for i in ways {
                let model = self.models[i].load(Ordering::Acquire);
                if model == hash {
                    return Ok(Place::Tracked(i as u32));
                }
                if model == 0 {
                    free[set].0 += 1;
                    free[set].1 = free[set].1.or(Some((i, 0)));
                } else if idle.is_none() && self.windows[i].idle_at(epoch) {
                    idle = Some((i, model));
                }
            }
        }
        let [first, second] = free;
        let free = if second.0 > first.0 {
            second.1
        } else {
            first.1
        };
        Err(free.or(idle))
    }

    /// The window of the model whose ID hashes to `hash` (`None`: no model
    /// known) at `now`, giving it a free or idle window of its set when it
    /// has none (see the [module docs](self)).
    pub(crate) fn place(&self, hash: Option<u64>, now: Instant) -> Place {
        let Some(hash) = hash else {
            return Place::Shared;
        };
        let hash = hash.max(1);
        let epoch = self.ms(now) / self.half_ms;
        // A window lost to another model placed at once: look again.
        for _ in 0..=WAYS {
            let (i, held) = match self.look_up(hash, epoch) {
                Ok(place) => return place,
                Err(None) => return Place::Shared,
                Err(Some(vacant)) => vacant,
            };
            if self.models[i]
                .compare_exchange(held, hash, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                // An idle window's samples are out of the window: moving
                // it to now clears both halves and its cached delay.
                self.windows[i].rotate(epoch);
                return Place::Tracked(i as u32);
            }
        }
        Place::Shared
    }

    /// Windows held by a model (including idle ones not handed on yet): at
    /// most `max_models`.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn tracked(&self) -> usize {
        let held = |model: &&AtomicU64| model.load(Ordering::Relaxed) != 0;
        self.models.iter().filter(held).count()
    }

    /// The window of a model at `now` (`None`: it has none, and one is
    /// free or idle for it), assigning nothing.
    pub(crate) fn find(&self, hash: u64, now: Instant) -> Option<Place> {
        let epoch = self.ms(now) / self.half_ms;
        match self.look_up(hash.max(1), epoch) {
            Ok(place) => Some(place),
            Err(None) => Some(Place::Shared),
            Err(Some(_)) => None,
        }
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
        if window.delay_us.load(Ordering::Acquire) == NOT_ENOUGH {
            // Still warming up: the next read counts again, so the request
            // after the `min_samples`th sample hedges, not one up to
            // `REFRESH_MS` later (at most `min_samples` recounts).
            window.refresh_at.store(0, Ordering::Release);
        }
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
mod tests;
