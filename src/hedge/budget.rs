//! The budget of extra attempts (hedges and retries): at most a share of
//! the requests counted over a sliding window, without a lock.
//!
//! Why a budget and not a cap per request: a cap bounds each request's
//! attempts but not the fleet's extra load — when every request is slow
//! (an overload, a fleet-wide stall), every request hedges and the load
//! doubles just when there is least room for it. A budget ties extra
//! attempts to the traffic: with ratio 0.05 the hedges and retries
//! together add at most 5% to the requests sent, whatever the latency
//! (as in Finagle's and tower's retry budgets). Like theirs it has a
//! floor, `min_per_sec` extra attempts a second over the window whatever
//! the traffic: at a few requests a second a share of them is less than
//! one retry, and a connection a server closed (uvicorn after a 500) would
//! fail a request that a retry elsewhere answers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// Buckets the window is counted in; the oldest expires as a new one
/// starts, so the window slides in tenths.
const BUCKETS: usize = 10;

/// A share of requests that extra attempts may add, over a sliding window.
///
/// Shared (behind an `Arc`) by a [`HedgeLayer`](super::HedgeLayer)'s
/// services and the [`RetryPolicy`](super::RetryPolicy) built from it, so
/// hedges and retries together stay within one budget.
#[derive(Debug)]
pub struct Budget {
    /// Extra attempts per request, in billionths.
    ratio: u64,
    /// Extra attempts the window allows whatever the traffic, in
    /// billionths: the floor a second × the window's seconds.
    reserve: u64,
    bucket_ms: u64,
    base: Instant,
    buckets: [Bucket; BUCKETS],
    granted: AtomicU64,
    refused: AtomicU64,
}

#[derive(Debug, Default)]
struct Bucket {
    /// The bucket's epoch (ms since base ÷ bucket length) + 1; 0: unused.
    epoch: AtomicU64,
    requests: AtomicU64,
    extra: AtomicU64,
}

const SCALE: f64 = 1e9;

impl Budget {
    /// A budget of `ratio` extra attempts per request (in [0, 1]) plus
    /// `min_per_sec` a second, over the last `window` (at least 10 ms), its
    /// clock starting at `now`.
    pub(crate) fn new(ratio: f64, min_per_sec: u32, window: Duration, now: Instant) -> Self {
        let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
        // Billionths: 1e9 ÷ 1e3 per attempt-millisecond.
        let reserve = u64::from(min_per_sec).saturating_mul(window_ms.saturating_mul(1_000_000));
        Self {
            ratio: (ratio.clamp(0.0, 1.0) * SCALE).round() as u64,
            reserve,
            bucket_ms: (window_ms / BUCKETS as u64).max(1),
            base: now,
            buckets: Default::default(),
            granted: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// The current epoch + 1 (0 marks an unused bucket).
    fn epoch(&self, now: Instant) -> u64 {
        let ms = u64::try_from(now.saturating_duration_since(self.base).as_millis());
        ms.unwrap_or(u64::MAX) / self.bucket_ms + 1
    }

    /// The bucket of `epoch`, cleared when it last held an older epoch.
    fn bucket(&self, epoch: u64) -> &Bucket {
        let bucket = &self.buckets[(epoch % BUCKETS as u64) as usize];
        let seen = bucket.epoch.load(Ordering::Acquire);
        if seen < epoch
            && bucket
                .epoch
                .compare_exchange(seen, epoch, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            // A count racing with the clear may be lost: a bucket is a
            // tenth of the window, the error a few requests.
            bucket.requests.store(0, Ordering::Relaxed);
            bucket.extra.store(0, Ordering::Relaxed);
        }
        bucket
    }

    /// Counts one request (one relaxed add on the current bucket).
    pub(crate) fn deposit(&self, now: Instant) {
        let epoch = self.epoch(now);
        self.bucket(epoch).requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests and extra attempts counted in the window ending at `epoch`.
    fn sums(&self, epoch: u64) -> (u64, u64) {
        let live = epoch.saturating_sub(BUCKETS as u64 - 1)..=epoch;
        self.buckets
            .iter()
            .filter(|b| live.contains(&b.epoch.load(Ordering::Acquire)))
            .fold((0, 0), |(r, x), b| {
                let requests = b.requests.load(Ordering::Relaxed);
                (r + requests, x + b.extra.load(Ordering::Relaxed))
            })
    }

    /// Takes one extra attempt if the window has room: the extra attempts
    /// in it, this one included, at most `ratio` × its requests plus the
    /// floor's `min_per_sec` × the window's seconds. Counts
    /// first and gives back on refusal, so concurrent takers never
    /// overdraw.
    pub(crate) fn try_withdraw(&self, now: Instant) -> bool {
        let epoch = self.epoch(now);
        let bucket = self.bucket(epoch);
        bucket.extra.fetch_add(1, Ordering::AcqRel);
        let (requests, extra) = self.sums(epoch);
        let allowed = requests
            .saturating_mul(self.ratio)
            .saturating_add(self.reserve);
        if extra.saturating_mul(SCALE as u64) <= allowed {
            self.granted.fetch_add(1, Ordering::Relaxed);
            true
        } else {
            bucket.extra.fetch_sub(1, Ordering::AcqRel);
            self.refused.fetch_add(1, Ordering::Relaxed);
            false
        }
    }

    /// Gives back one extra attempt granted by [`Budget::try_withdraw`]
    /// that was not sent after all (a backup the balancer refused), to the
    /// current bucket: the same one unless a tenth of the window passed
    /// in between.
    pub(crate) fn refund(&self, now: Instant) {
        let bucket = self.bucket(self.epoch(now));
        let less = |x: u64| x.checked_sub(1);
        let _ = bucket
            .extra
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, less);
        let _ = self
            .granted
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, less);
    }

    /// Extra attempts granted since the budget was built.
    pub fn granted(&self) -> u64 {
        self.granted.load(Ordering::Relaxed)
    }

    /// Extra attempts refused since the budget was built.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(ratio: f64) -> (Budget, Instant) {
        let now = Instant::now();
        (Budget::new(ratio, 0, Duration::from_secs(10), now), now)
    }

    #[test]
    fn the_floor_allows_attempts_without_traffic_and_adds_to_the_share() {
        let now = Instant::now();
        // 1 a second over 10 s: 10 attempts with no request counted.
        let b = Budget::new(0.05, 1, Duration::from_secs(10), now);
        assert_eq!((0..20).filter(|_| b.try_withdraw(now)).count(), 10);
        // 100 requests add their 5%.
        for _ in 0..100 {
            b.deposit(now);
        }
        assert_eq!((0..20).filter(|_| b.try_withdraw(now)).count(), 5);
        // Past the window the floor is whole again.
        let later = now + Duration::from_secs(11);
        assert_eq!((0..20).filter(|_| b.try_withdraw(later)).count(), 10);
    }

    #[test]
    fn extra_attempts_are_at_most_the_ratio_of_requests() {
        let (b, now) = budget(0.05);
        for _ in 0..100 {
            b.deposit(now);
        }
        let granted = (0..20).filter(|_| b.try_withdraw(now)).count();
        assert_eq!(granted, 5);
        assert_eq!((b.granted(), b.refused()), (5, 15));
        // 20 more requests: one more extra attempt.
        for _ in 0..20 {
            b.deposit(now);
        }
        assert!(b.try_withdraw(now));
        assert!(!b.try_withdraw(now));
    }

    #[test]
    fn no_requests_no_extra_and_zero_ratio_never() {
        let (b, now) = budget(0.05);
        assert!(!b.try_withdraw(now));
        let (b, now) = budget(0.0);
        for _ in 0..1000 {
            b.deposit(now);
        }
        assert!(!b.try_withdraw(now));
    }

    #[test]
    fn a_refund_gives_the_attempt_back() {
        let (b, now) = budget(0.1);
        for _ in 0..10 {
            b.deposit(now);
        }
        assert!(b.try_withdraw(now));
        assert!(!b.try_withdraw(now), "one in ten");
        b.refund(now);
        assert_eq!(b.granted(), 0);
        assert!(b.try_withdraw(now), "room again");
        let (empty, now) = budget(0.1);
        empty.refund(now);
        assert_eq!(empty.granted(), 0, "nothing to give back: no wrap");
    }

    #[test]
    fn the_window_slides() {
        let (b, start) = budget(0.1);
        for _ in 0..100 {
            b.deposit(start);
        }
        let granted = (0..10).filter(|_| b.try_withdraw(start)).count();
        assert_eq!(granted, 10);
        // 9.9 s later the spent budget still counts.
        let later = start + Duration::from_millis(9_900);
        for _ in 0..10 {
            b.deposit(later);
        }
        assert!(b.try_withdraw(later));
        assert!(!b.try_withdraw(later));
        // Past the window the first bucket has expired: its 100 requests and
        // 10 attempts are gone; 10 requests and 1 attempt remain.
        let past = start + Duration::from_millis(10_000);
        assert!(!b.try_withdraw(past));
        for _ in 0..10 {
            b.deposit(past);
        }
        assert!(b.try_withdraw(past));
        // Long after, nothing remains.
        let idle = start + Duration::from_secs(60);
        assert!(!b.try_withdraw(idle));
    }
}
