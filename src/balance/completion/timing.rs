//! When a picked request's answer arrived: its head, its first frame and,
//! for an event stream, each later frame — what its latency stops at, its
//! time to first token and time per output token.

use std::time::Duration;

use tokio::time::Instant;

use crate::breaker::StopPoint;

/// Microseconds since the pick of the head, the first frame and the last
/// frame (each + 1; 0: not yet), the chunks they carried, and whether the
/// body ended: 20 bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Timing {
    head: u32,
    first: u32,
    last: u32,
    chunks: u32,
    ended: bool,
}

/// µs since `started`, + 1, saturating at about 71 minutes.
fn mark(started: Instant, now: Instant) -> u32 {
    let us = now.saturating_duration_since(started).as_micros();
    u32::try_from(us).unwrap_or(u32::MAX - 1) + 1
}

fn duration(mark: u32) -> Option<Duration> {
    mark.checked_sub(1)
        .map(|us| Duration::from_micros(u64::from(us)))
}

impl Timing {
    /// The head arrived at `now`.
    pub(crate) fn head(&mut self, started: Instant, now: Instant) {
        self.head = mark(started, now);
    }

    /// A frame with `chunks` of the answer arrived at `now`.
    pub(crate) fn frame(&mut self, started: Instant, now: Instant, chunks: u32) {
        let at = mark(started, now);
        if self.first == 0 {
            self.first = at;
        }
        self.last = at;
        self.chunks = self.chunks.saturating_add(chunks);
    }

    /// The body ended (not dropped).
    pub(crate) fn ended(&mut self) {
        self.ended = true;
    }

    /// Whether a frame arrived.
    pub(crate) fn has_frame(&self) -> bool {
        self.first != 0
    }

    /// The latency `stop` reads, of a call that took `total`: up to its
    /// head or first frame if either came (the total otherwise).
    pub(crate) fn latency(&self, stop: StopPoint, total: Duration) -> Duration {
        let at = match stop {
            StopPoint::Headers => duration(self.head),
            StopPoint::FirstFrame => duration(self.first),
            _ => None,
        };
        at.unwrap_or(total)
    }

    /// Of a body that ended: the time to its first chunk, and the mean gap
    /// between its chunks after the first (from the first frame's to the
    /// last's, over the chunks less one; `None` with one chunk); `None`
    /// without a chunk, or for a body dropped before its end.
    pub(crate) fn ended_stream(&self) -> Option<(Duration, Option<Duration>)> {
        if !self.ended {
            return None;
        }
        let ttft = duration(self.first)?;
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
        let mut t = Timing::default();
        let first = t.latency(StopPoint::FirstFrame, total);
        assert_eq!(first, total, "no frame yet");
        t.ended();
        assert_eq!(t.ended_stream(), None, "no chunk");
        let mut t = Timing::default();
        t.head(start, start + ms(5));
        t.frame(start, start + ms(200), 1);
        assert!(t.has_frame());
        assert_eq!(t.ended_stream(), None, "not ended: dropped so far");
        for i in 1..=10 {
            t.frame(start, start + ms(200 + 50 * i), 1);
        }
        assert_eq!(t.latency(StopPoint::Headers, total), ms(5));
        assert_eq!(t.latency(StopPoint::FirstFrame, total), ms(200));
        assert_eq!(t.latency(StopPoint::EndOfBody, total), total);
        t.ended();
        assert_eq!(t.ended_stream(), Some((ms(200), Some(ms(50)))));
        // Two chunks in one frame: two gaps over the span.
        let mut two = Timing::default();
        two.frame(start, start + ms(10), 2);
        two.frame(start, start + ms(30), 1);
        two.ended();
        assert_eq!(two.ended_stream(), Some((ms(10), Some(ms(10)))));
        // A frame before the pick's clock (never): 0 µs, still a frame.
        let mut early = Timing::default();
        early.frame(start + ms(1), start, 1);
        early.ended();
        assert_eq!(early.ended_stream(), Some((Duration::ZERO, None)));
    }
}
