//! Which of one balancer clone's requests feed the estimates (pure logic:
//! no clock read of its own, no atomics).
//!
//! Two samples, drawn from one random number per request (Marsaglia's
//! xorshift64; at random rather than every n-th request, so a client
//! cycling through a few models is not sampled for one model only):
//!
//! * **counted**: the clone's first request, then one in [`COUNT_ONE_IN`],
//!   is counted in the demand table. A fixed rate, so that every
//!   long-lived clone's requests weigh the same in the shares (the table
//!   counts each sampled request as one).
//! * **timed**: the clone's first request, then each with probability
//!   `2^-shift`, is timed (two clock reads, about 20 ns each, and the
//!   latency, health and work records: about 150 ns a request) and renews
//!   its model's recency where it is resident. `shift` follows the
//!   clone's request rate, measured from the timed requests' own start
//!   times over windows of at least [`WINDOW_NS`] (or [`WINDOW_REQUESTS`]
//!   requests): the least shift that keeps timed requests [`MIN_GAP_NS`]
//!   apart on average, up to [`MAX_SHIFT`]. Every request is timed while
//!   the clone sends up to about 10,000 a second; one in 16 at the
//!   sparsest. A probability adapted to a target rate, as in Jaeger's
//!   adaptive sampling, with a floor so that no traffic goes unmeasured.

use tokio::time::Instant;

/// One request in this many, after a clone's first, is counted in the
/// demand table.
pub(crate) const COUNT_ONE_IN: u64 = 4;
/// The least mean time between timed requests of one clone (ns): 100 µs,
/// at most about 10,000 timed requests a second per clone.
pub(crate) const MIN_GAP_NS: u64 = 100_000;
/// The sparsest timing: one request in `2^MAX_SHIFT` = 16.
pub(crate) const MAX_SHIFT: u32 = 4;
/// The shortest window the request rate is measured over (ns): 1 ms, so
/// that one short gap between two requests (a pair sent together) does
/// not pass for the rate.
pub(crate) const WINDOW_NS: u64 = 1_000_000;
/// Requests that close a window shorter than [`WINDOW_NS`] (a clock that
/// does not move, as Tokio's paused one).
pub(crate) const WINDOW_REQUESTS: u64 = 1_024;

/// What the sample makes of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Draw {
    /// Counted in its model's demand.
    pub(crate) counted: bool,
    /// Timed, its model's recency renewed; its start time goes to
    /// [`Sampler::started`].
    pub(crate) timed: bool,
}

/// One clone's samples of its requests.
#[derive(Debug, Clone)]
pub(crate) struct Sampler {
    /// Xorshift64 state (never 0).
    random: u64,
    /// Whether the clone routed a request yet.
    used: bool,
    /// Requests are timed with probability `2^-shift`.
    shift: u32,
    /// Requests since the window opened.
    since: u64,
    /// When the window opened (a timed request's start); `None` before
    /// the first timed request.
    window: Option<Instant>,
}

impl Sampler {
    /// A sampler drawing from `seed` (any value), whose next request is
    /// counted and timed.
    pub(crate) fn new(seed: u64) -> Self {
        Self {
            random: seed | 1,
            used: false,
            shift: 0,
            since: 0,
            window: None,
        }
    }

    /// Draws the next request's samples. A timed request's start time
    /// must be given to [`Sampler::started`].
    #[inline]
    pub(crate) fn draw(&mut self) -> Draw {
        self.since += 1;
        if !self.used {
            self.used = true;
            return Draw {
                counted: true,
                timed: true,
            };
        }
        let mut x = self.random;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.random = x;
        Draw {
            counted: x.is_multiple_of(COUNT_ONE_IN),
            // Bits apart from the ones `counted` read: the two samples
            // are drawn independently.
            timed: self.window.is_none() || (x >> 8) & ((1 << self.shift) - 1) == 0,
        }
    }

    /// A timed request started at `now`: once the window is long enough,
    /// sets the rate of timing from the requests in it.
    pub(crate) fn started(&mut self, now: Instant) {
        let Some(open) = self.window else {
            self.window = Some(now);
            self.since = 0;
            return;
        };
        let span = now.saturating_duration_since(open).as_nanos();
        if span < u128::from(WINDOW_NS) && self.since < WINDOW_REQUESTS {
            return;
        }
        // Timing one in 2^shift, requests `span / since` apart are timed
        // `2^shift × span / since` apart: the least shift that makes it
        // MIN_GAP. A window closed by its count on a clock that did not
        // move: the sparsest.
        let needed = u128::from(MIN_GAP_NS) * u128::from(self.since);
        self.shift = match span {
            0 => MAX_SHIFT,
            span => {
                let ratio = needed.div_ceil(span).min(1 << MAX_SHIFT) as u64;
                ratio.next_power_of_two().trailing_zeros()
            }
        };
        self.window = Some(now);
        self.since = 0;
    }

    /// The probability of timing now, as its shift (tests).
    #[cfg(test)]
    pub(crate) fn shift(&self) -> u32 {
        self.shift
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    /// Sends requests `gaps` apart through `s`, advancing the paused
    /// clock, and returns how many were timed and how many counted.
    async fn send(s: &mut Sampler, gaps: impl IntoIterator<Item = Duration>) -> (usize, usize) {
        let (mut timed, mut counted) = (0, 0);
        for gap in gaps {
            let draw = s.draw();
            if draw.timed {
                s.started(Instant::now());
                timed += 1;
            }
            counted += usize::from(draw.counted);
            tokio::time::advance(gap).await;
        }
        (timed, counted)
    }

    fn every(gap: Duration, n: usize) -> impl Iterator<Item = Duration> {
        std::iter::repeat_n(gap, n)
    }

    /// Exponential gaps of mean `mean` (a Poisson arrival process).
    fn poisson(mean: Duration, n: usize, seed: u64) -> Vec<Duration> {
        let mut rng = SmallRng::seed_from_u64(seed);
        (0..n)
            .map(|_| mean.mul_f64(-(1.0 - rng.gen::<f64>()).ln()))
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn light_traffic_is_timed_whole() {
        let mut s = Sampler::new(7);
        // 1,000 a second: 1 ms apart, well over the 100 µs gap.
        assert_eq!(
            send(&mut s, every(Duration::from_millis(1), 1_000)).await.0,
            1_000
        );
        assert_eq!(s.shift(), 0);
        // Exactly at the gap: still every request.
        let at_gap = every(Duration::from_nanos(MIN_GAP_NS), 1_000);
        assert_eq!(send(&mut s, at_gap).await.0, 1_000);
    }

    /// Random arrivals, and requests sent in pairs, are judged by their
    /// rate over the window, not by their shortest gaps.
    #[tokio::test(start_paused = true)]
    async fn bursty_light_traffic_is_timed_whole() {
        let mut s = Sampler::new(7);
        for per_second in [500, 2_000, 5_000] {
            let mean = Duration::from_secs(1) / per_second;
            let (timed, _) = send(&mut s, poisson(mean, 20_000, per_second.into())).await;
            assert!(timed >= 19_000, "{per_second}/s: {timed} of 20,000 timed");
        }
        // Pairs sent together, 1 ms apart.
        let pairs = (0..2_000).map(|i| Duration::from_millis(i % 2));
        assert_eq!(send(&mut s, pairs).await.0, 2_000);
    }

    #[tokio::test(start_paused = true)]
    async fn heavy_traffic_is_timed_down_to_the_gap() {
        let mut s = Sampler::new(7);
        // 40,000 a second (25 µs apart): one in 4 keeps timed requests
        // 100 µs apart.
        let (timed, _) = send(&mut s, every(Duration::from_micros(25), 40_000)).await;
        assert_eq!(s.shift(), 2);
        assert!((9_000..=11_500).contains(&timed), "{timed}");
        // 30 µs apart: one in 4 gives 120 µs, one in 2 only 60.
        send(&mut s, every(Duration::from_micros(30), 10_000)).await;
        assert_eq!(s.shift(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn timing_is_never_sparser_than_one_in_16() {
        let mut s = Sampler::new(7);
        // A million a second (the first millisecond's 1,000 measure it),
        // and then no time at all between requests.
        send(&mut s, every(Duration::from_micros(1), 1_000)).await;
        let (fast, _) = send(&mut s, every(Duration::from_micros(1), 16_000)).await;
        assert_eq!(s.shift(), MAX_SHIFT);
        let (burst, _) = send(&mut s, every(Duration::ZERO, 16_000)).await;
        assert_eq!(s.shift(), MAX_SHIFT);
        assert!((800..=1_300).contains(&fast), "{fast}");
        assert!((800..=1_200).contains(&burst), "{burst}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_rate_follows_the_traffic_back_up() {
        let mut s = Sampler::new(7);
        send(&mut s, every(Duration::ZERO, 2_000)).await;
        assert_eq!(s.shift(), MAX_SHIFT);
        // Traffic falls to one request a millisecond: the next timed
        // request finds it, and every request is timed from then on.
        send(&mut s, every(Duration::from_millis(1), 64)).await;
        assert_eq!(s.shift(), 0);
        assert_eq!(
            send(&mut s, every(Duration::from_millis(1), 100)).await.0,
            100
        );
    }

    /// Demand counts one request in 4 whatever the clone's rate, so that
    /// clones of every rate weigh the same in the shares.
    #[tokio::test(start_paused = true)]
    async fn counting_does_not_follow_the_rate() {
        for gap in [Duration::from_millis(1), Duration::ZERO] {
            let mut s = Sampler::new(7);
            let (_, counted) = send(&mut s, every(gap, 40_000)).await;
            assert!((9_500..=10_500).contains(&counted), "{gap:?}: {counted}");
        }
    }

    #[test]
    fn the_first_request_is_counted_and_timed_whatever_the_seed() {
        for seed in [0, 1, u64::MAX] {
            let first = Sampler::new(seed).draw();
            assert_eq!((first.counted, first.timed), (true, true));
        }
    }
}
