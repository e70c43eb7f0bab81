//! Where a call's clock stops ([`StopPoint`]) and when its answer came
//! ([`Timing`]): its head, its first frame and, for an event stream, each
//! later frame — the latency the breaker judges slow calls by (and the
//! balancer its health, latency estimate and limit by), and a stream's
//! time to first token and time per output token.

use std::time::Duration;

use tokio::time::Instant;

/// Where the slow-call clock stops: the elapsed time a call is judged slow
/// by runs from its start (the breaker's admission of the call's
/// [`Permit`](crate::breaker::Permit); the balancer's pick) to this point, on tokio's clock. The outcome itself is always
/// recorded at the end of the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum StopPoint {
    /// When the response's head (status, headers) arrives.
    Headers,
    /// When the body's first frame (data or trailers) arrives, or the body
    /// ends, fails or is dropped before one does (the default: for a
    /// stream of tokens, close to the time to first token).
    #[default]
    FirstFrame,
    /// When the body ends, fails or is dropped.
    EndOfBody,
}

/// A time since a call's start as a [`Timing`] keeps it: + 1, 0 for not
/// yet, saturating.
pub(crate) trait Mark: Copy + Default + Eq {
    /// The mark of `now`, for a call started at `started` (0 if `now` is
    /// earlier, still a mark).
    fn mark(started: Instant, now: Instant) -> Self;

    /// The time since the start, if marked.
    fn since_start(self) -> Option<Duration>;
}

/// Microseconds (the balancer's: 4 bytes, saturating at about 71 minutes).
impl Mark for u32 {
    fn mark(started: Instant, now: Instant) -> Self {
        let us = now.saturating_duration_since(started).as_micros();
        u32::try_from(us).unwrap_or(u32::MAX - 1) + 1
    }

    fn since_start(self) -> Option<Duration> {
        self.checked_sub(1)
            .map(|us| Duration::from_micros(u64::from(us)))
    }
}

/// Nanoseconds (the breaker's: exact, saturating after 584 years).
impl Mark for u64 {
    fn mark(started: Instant, now: Instant) -> Self {
        let ns = now.saturating_duration_since(started).as_nanos();
        u64::try_from(ns).unwrap_or(u64::MAX - 1) + 1
    }

    fn since_start(self) -> Option<Duration> {
        self.checked_sub(1).map(Duration::from_nanos)
    }
}

/// When a call's head, first frame and last frame came, as marks `M`
/// since its start, the chunks they carried, and whether the body ended.
/// The head is marked only when the clock stops there, the first frame
/// when the clock stops there or every frame is timed (an event stream).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Timing<M = u32> {
    head: M,
    first: M,
    last: M,
    chunks: u32,
    ended: bool,
}

impl<M: Mark> Timing<M> {
    /// The head arrived (at `now()`, read only if `stop` stops the clock
    /// there).
    pub(crate) fn head(
        &mut self,
        stop: StopPoint,
        started: Instant,
        now: impl FnOnce() -> Instant,
    ) {
        if stop == StopPoint::Headers {
            self.head = M::mark(started, now());
        }
    }

    /// A frame with `chunks` of the answer arrived (at `now()`, read only
    /// if the frame is timed: the first where `stop` stops the clock
    /// there, or any if `every` frame is).
    pub(crate) fn frame(
        &mut self,
        stop: StopPoint,
        every: bool,
        started: Instant,
        now: impl FnOnce() -> Instant,
        chunks: u32,
    ) {
        let first = !self.has_frame() && stop == StopPoint::FirstFrame;
        if first || every {
            self.frame_at(M::mark(started, now()), chunks);
        }
    }

    fn frame_at(&mut self, at: M, chunks: u32) {
        if !self.has_frame() {
            self.first = at;
        }
        self.last = at;
        self.chunks = self.chunks.saturating_add(chunks);
    }

    /// The body ended (not dropped). The balancer's (a stream's figures).
    #[cfg_attr(not(feature = "balance"), allow(dead_code))]
    pub(crate) fn ended(&mut self) {
        self.ended = true;
    }

    /// Whether a frame was timed.
    fn has_frame(&self) -> bool {
        self.first != M::default()
    }

    /// The latency `stop` reads, of a call that took `total`: up to its
    /// head or first frame if either came (the total otherwise).
    pub(crate) fn latency(&self, stop: StopPoint, total: Duration) -> Duration {
        let at = match stop {
            StopPoint::Headers => self.head.since_start(),
            StopPoint::FirstFrame => self.first.since_start(),
            StopPoint::EndOfBody => None,
        };
        at.unwrap_or(total)
    }
}

#[cfg_attr(not(feature = "balance"), allow(dead_code))]
impl Timing<u32> {
    /// Of a body that ended: the time to its first chunk, and the mean gap
    /// between its chunks after the first (from the first frame's to the
    /// last's, over the chunks less one; `None` with one chunk); `None`
    /// without a chunk, or for a body dropped before its end.
    pub(crate) fn ended_stream(&self) -> Option<(Duration, Option<Duration>)> {
        if !self.ended {
            return None;
        }
        let ttft = self.first.since_start()?;
        let gaps = self.chunks.saturating_sub(1);
        let tpot = (gaps > 0)
            .then(|| Duration::from_micros(u64::from(self.last - self.first) / u64::from(gaps)));
        Some((ttft, tpot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_points_and_stream_figures() {
        let start = Instant::now();
        let ms = Duration::from_millis;
        let total = ms(1_000);
        let mut t = Timing::<u32>::default();
        let first = t.latency(StopPoint::FirstFrame, total);
        assert_eq!(first, total, "no frame yet");
        t.ended();
        assert_eq!(t.ended_stream(), None, "no chunk");
        let mut t = Timing::<u32>::default();
        t.head(StopPoint::Headers, start, || start + ms(5));
        t.frame(StopPoint::FirstFrame, true, start, || start + ms(200), 1);
        assert!(t.has_frame());
        assert_eq!(t.ended_stream(), None, "not ended: dropped so far");
        for i in 1..=10 {
            t.frame(
                StopPoint::FirstFrame,
                true,
                start,
                || start + ms(200 + 50 * i),
                1,
            );
        }
        assert_eq!(t.latency(StopPoint::Headers, total), ms(5));
        assert_eq!(t.latency(StopPoint::FirstFrame, total), ms(200));
        assert_eq!(t.latency(StopPoint::EndOfBody, total), total);
        t.ended();
        assert_eq!(t.ended_stream(), Some((ms(200), Some(ms(50)))));
        // Two chunks in one frame: two gaps over the span.
        let mut two = Timing::<u32>::default();
        two.frame(StopPoint::FirstFrame, true, start, || start + ms(10), 2);
        two.frame(StopPoint::FirstFrame, true, start, || start + ms(30), 1);
        two.ended();
        assert_eq!(two.ended_stream(), Some((ms(10), Some(ms(10)))));
        // A frame before the start's clock (never): 0 µs, still a frame.
        let mut early = Timing::<u32>::default();
        early.frame(StopPoint::FirstFrame, true, start + ms(1), || start, 1);
        early.ended();
        assert_eq!(early.ended_stream(), Some((Duration::ZERO, None)));
    }

    #[test]
    fn the_clock_is_read_only_where_it_stops() {
        let start = Instant::now();
        let ms = Duration::from_millis;
        let unread = || -> Instant { panic!("the clock was read") };
        let mut t = Timing::<u64>::default();
        t.head(StopPoint::FirstFrame, start, unread);
        t.frame(StopPoint::Headers, false, start, unread, 1);
        t.frame(StopPoint::EndOfBody, false, start, unread, 1);
        assert_eq!(t, Timing::default(), "nothing marked");
        t.frame(StopPoint::FirstFrame, false, start, || start + ms(7), 1);
        t.frame(StopPoint::FirstFrame, false, start, unread, 1);
        assert_eq!(
            t.latency(StopPoint::FirstFrame, ms(9)),
            ms(7),
            "the first frame's"
        );
    }

    #[test]
    fn nanosecond_marks_are_exact() {
        let start = Instant::now();
        let odd = Duration::from_nanos(1_234_567_891);
        let mut t = Timing::<u64>::default();
        t.head(StopPoint::Headers, start, || start + odd);
        assert_eq!(t.latency(StopPoint::Headers, Duration::MAX), odd);
        let mut t = Timing::<u32>::default();
        t.head(StopPoint::Headers, start, || start + odd);
        let us = Duration::from_micros(1_234_567);
        assert_eq!(
            t.latency(StopPoint::Headers, Duration::MAX),
            us,
            "µs, truncated"
        );
    }
}
