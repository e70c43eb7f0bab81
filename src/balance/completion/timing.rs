//! When a picked request's answer arrived: its head, its first frame and,
//! for an event stream, each later frame — what its latency stops at, its
//! time to first token and time per output token.

use std::time::Duration;

use tokio::time::Instant;

use crate::breaker::StopPoint;

/// Microseconds since the pick of the head, the first frame and the last
/// frame (each + 1; 0: not yet), and the frames seen: 16 bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Timing {
    head: u32,
    first: u32,
    last: u32,
    frames: u32,
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

    /// A frame arrived at `now`.
    pub(crate) fn frame(&mut self, started: Instant, now: Instant) {
        let at = mark(started, now);
        if self.first == 0 {
            self.first = at;
        }
        self.last = at;
        self.frames = self.frames.saturating_add(1);
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

    /// Time to the first frame, and the mean gap between frames after it
    /// (`None` with one frame); `None` without a frame.
    pub(crate) fn stream(&self) -> Option<(Duration, Option<Duration>)> {
        let ttft = duration(self.first)?;
        let gaps = self.frames.saturating_sub(1);
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
        assert_eq!(
            t.latency(StopPoint::FirstFrame, total),
            total,
            "no frame yet"
        );
        assert_eq!(t.stream(), None);
        t.head(start, start + ms(5));
        t.frame(start, start + ms(200));
        assert!(t.has_frame());
        assert_eq!(t.stream(), Some((ms(200), None)));
        for i in 1..=10 {
            t.frame(start, start + ms(200 + 50 * i));
        }
        assert_eq!(t.latency(StopPoint::Headers, total), ms(5));
        assert_eq!(t.latency(StopPoint::FirstFrame, total), ms(200));
        assert_eq!(t.latency(StopPoint::EndOfBody, total), total);
        assert_eq!(t.stream(), Some((ms(200), Some(ms(50)))));
        // A frame before the pick's clock (never): 0 µs, still a frame.
        let mut early = Timing::default();
        early.frame(start + ms(1), start);
        assert_eq!(early.stream(), Some((Duration::ZERO, None)));
    }
}
