//! Which of one balancer clone's requests feed the estimates: a sample
//! whose rate follows the clone's traffic, so that estimates get every
//! request while traffic is light and the per-request cost stays low
//! while it is heavy (pure logic: no clock read of its own, no atomics).
//!
//! A sampled request is counted in the demand table, timed (two clock
//! reads, about 20 ns each) and renews its model's recency where it is
//! resident: about 150 ns more than a request outside the sample. The
//! clone's first request is always in the sample; after it, each request
//! is in it with probability `2^-shift`, drawn at random (Marsaglia's
//! xorshift64) rather than every `2^shift`-th, so a client cycling through
//! a few models is not sampled for one model only. Each sampled request's
//! own clock read (its start time) measures the clone's request rate since
//! the sample before, and `shift` is set to the least that keeps the
//! sampled requests at least [`MIN_GAP`] apart on average, up to
//! [`MAX_SHIFT`]: every request up to 10,000 a second per clone, one in 16
//! at the sparsest. A probability adapted to a target rate, as in Jaeger's
//! adaptive sampling, with a floor so that no traffic goes unestimated.

use tokio::time::Instant;

/// The least mean time between sampled requests of one clone (ns):
/// 100 µs, at most about 10,000 sampled requests a second per clone.
pub(crate) const MIN_GAP_NS: u64 = 100_000;
/// The sparsest sample: one request in `2^MAX_SHIFT` = 16.
pub(crate) const MAX_SHIFT: u32 = 4;

/// One clone's sample of its requests.
#[derive(Debug, Clone)]
pub(crate) struct Sampler {
    /// Xorshift64 state (never 0).
    random: u64,
    /// Requests are sampled with probability `2^-shift`.
    shift: u32,
    /// Requests since the last sampled one.
    since: u64,
    /// When the last sampled request started; `None` before the first.
    last: Option<Instant>,
}

impl Sampler {
    /// A sampler drawing from `seed` (any value), whose next request is
    /// in the sample.
    pub(crate) fn new(seed: u64) -> Self {
        Self {
            random: seed | 1,
            shift: 0,
            since: 0,
            last: None,
        }
    }

    /// Whether the next request is in the sample. A sampled request's
    /// start time must be given to [`Sampler::started`].
    #[inline]
    pub(crate) fn sample(&mut self) -> bool {
        self.since += 1;
        if self.last.is_none() {
            return true;
        }
        let mut x = self.random;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.random = x;
        x & ((1 << self.shift) - 1) == 0
    }

    /// A sampled request started at `now`: sets the rate of the sample
    /// from the time since the last one and the requests in between.
    pub(crate) fn started(&mut self, now: Instant) {
        if let Some(last) = self.last {
            let gap = now.saturating_duration_since(last).as_nanos();
            // Sampling one in 2^shift, requests `gap / since` apart are
            // sampled `2^shift × gap / since` apart: the least shift that
            // makes it MIN_GAP. Without time between (a paused clock, or a
            // burst within a nanosecond), the sparsest.
            let needed = u128::from(MIN_GAP_NS) * u128::from(self.since);
            self.shift = match gap {
                0 => MAX_SHIFT,
                gap => {
                    let ratio = needed.div_ceil(gap).min(1 << MAX_SHIFT) as u64;
                    ratio.next_power_of_two().trailing_zeros()
                }
            };
        }
        self.last = Some(now);
        self.since = 0;
    }

    /// The probability of the sample now, as its shift (tests).
    #[cfg(test)]
    pub(crate) fn shift(&self) -> u32 {
        self.shift
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Sends `n` requests `every` apart through `s`, advancing the paused
    /// clock, and returns how many were sampled.
    async fn send(s: &mut Sampler, n: usize, every: Duration) -> usize {
        let mut sampled = 0;
        for _ in 0..n {
            if s.sample() {
                s.started(Instant::now());
                sampled += 1;
            }
            tokio::time::advance(every).await;
        }
        sampled
    }

    #[tokio::test(start_paused = true)]
    async fn light_traffic_is_sampled_whole() {
        let mut s = Sampler::new(7);
        // 1,000 a second: 1 ms apart, well over the 100 µs gap.
        assert_eq!(send(&mut s, 1_000, Duration::from_millis(1)).await, 1_000);
        assert_eq!(s.shift(), 0);
        // Exactly at the gap: still every request.
        assert_eq!(
            send(&mut s, 100, Duration::from_nanos(MIN_GAP_NS)).await,
            100
        );
    }

    #[tokio::test(start_paused = true)]
    async fn heavy_traffic_is_sampled_down_to_the_gap() {
        let mut s = Sampler::new(7);
        // 40,000 a second (25 µs apart): one in 4 keeps sampled requests
        // 100 µs apart.
        let sampled = send(&mut s, 40_000, Duration::from_micros(25)).await;
        assert_eq!(s.shift(), 2);
        assert!((9_000..=11_000).contains(&sampled), "{sampled}");
        // 30 µs apart: one in 4 gives 120 µs, one in 2 only 60.
        send(&mut s, 10_000, Duration::from_micros(30)).await;
        assert_eq!(s.shift(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn the_sample_is_never_sparser_than_one_in_16() {
        let mut s = Sampler::new(7);
        // A million a second, and then no time at all between requests.
        let fast = send(&mut s, 16_000, Duration::from_micros(1)).await;
        assert_eq!(s.shift(), MAX_SHIFT);
        let burst = send(&mut s, 16_000, Duration::ZERO).await;
        assert_eq!(s.shift(), MAX_SHIFT);
        for sampled in [fast, burst] {
            assert!((800..=1_200).contains(&sampled), "{sampled}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_rate_follows_the_traffic_back_up() {
        let mut s = Sampler::new(7);
        send(&mut s, 1_000, Duration::ZERO).await;
        assert_eq!(s.shift(), MAX_SHIFT);
        // Traffic falls to one request a millisecond: the next sample
        // finds it, and every request is sampled from then on.
        send(&mut s, 64, Duration::from_millis(1)).await;
        assert_eq!(s.shift(), 0);
        assert_eq!(send(&mut s, 100, Duration::from_millis(1)).await, 100);
    }

    #[test]
    fn the_first_request_is_sampled_whatever_the_seed() {
        for seed in [0, 1, u64::MAX] {
            assert!(Sampler::new(seed).sample());
        }
    }
}
