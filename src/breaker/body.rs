//! The breaker's response body: the call's outcome is recorded when the
//! body ends.

use std::time::Duration;

use tokio::time::Instant;

use super::Permit;
use crate::classify::body::{Complete, CompletionBody};
use crate::classify::Outcome;

/// Where the slow-call clock stops: the elapsed time a call is judged slow
/// by runs from its admission ([`Permit::admitted`]) to this point, on
/// tokio's clock. The outcome itself is always recorded at the end of the
/// body.
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

/// The slow-call clock of one call.
#[derive(Debug, Clone, Copy)]
enum Clock {
    /// Stopped: the call took this long, or is untimed (`None`: a cold
    /// load).
    Stopped(Option<Duration>),
    /// Runs until the body's first frame or its end.
    UntilFirstFrame,
    /// Runs until the body's end.
    UntilEnd,
}

/// What the end of the body records to: the call's permit and its
/// slow-call clock. Recorded once, when the body ends, fails or is
/// dropped ([`CompletionBody`]). Not nameable outside the crate.
#[derive(Debug)]
pub struct Record {
    permit: Permit,
    clock: Clock,
}

impl Record {
    /// The record of a response whose head arrived at `now`; a `cold`
    /// load is untimed.
    pub(super) fn new(permit: Permit, stop: StopPoint, cold: bool, now: Instant) -> Self {
        let clock = match stop {
            _ if cold => Clock::Stopped(None),
            StopPoint::Headers => {
                Clock::Stopped(Some(now.saturating_duration_since(permit.admitted())))
            }
            StopPoint::FirstFrame => Clock::UntilFirstFrame,
            StopPoint::EndOfBody => Clock::UntilEnd,
        };
        Self { permit, clock }
    }
}

impl Complete for Record {
    fn frame(&mut self, _: u32) {
        if let Clock::UntilFirstFrame = self.clock {
            let elapsed = Instant::now().saturating_duration_since(self.permit.admitted());
            self.clock = Clock::Stopped(Some(elapsed));
        }
    }

    fn complete(self, outcome: Outcome) {
        let now = Instant::now();
        let elapsed = match self.clock {
            Clock::Stopped(elapsed) => elapsed,
            Clock::UntilFirstFrame | Clock::UntilEnd => {
                Some(now.saturating_duration_since(self.permit.admitted()))
            }
        };
        self.permit.record_call(outcome, elapsed, now);
    }
}

/// Response body of [`CircuitBreaker`](super::CircuitBreaker): the inner
/// body, unchanged, with the call's outcome recorded when it ends —
/// its last frame (a deferred outcome reads the trailers), an error (a
/// failure whatever the status), or its drop (the status decides; a
/// response whose head arrived is an outcome even if its body is never
/// read). A body that is empty (`is_end_stream`) from the start records
/// at once. Until then the call is in flight: a half-open probe's
/// permit stays out. No allocation.
pub type ResponseBody<B, Eos> = CompletionBody<B, Eos, Record>;
