//! The breaker's response body: the call's outcome is recorded when the
//! body ends.

use tokio::time::Instant;

use super::shared::permit::Permit;
use crate::classify::body::{Complete, CompletionBody};
use crate::classify::timing::{StopPoint, Timing};
use crate::classify::Outcome;

/// What the end of the body records to: the call's permit and its
/// slow-call clock, from the permit's admission to the [`StopPoint`]
/// (exact: nanosecond marks). Recorded once, when the body ends, fails or
/// is dropped ([`CompletionBody`]). Not nameable outside the crate.
#[derive(Debug)]
pub struct Record {
    permit: Permit,
    stop: StopPoint,
    /// `None`: untimed (a cold load).
    timing: Option<Timing<u64>>,
}

impl Record {
    /// The record of a response whose head arrived at `now`; a `cold`
    /// load is untimed.
    pub(super) fn new(permit: Permit, stop: StopPoint, cold: bool, now: Instant) -> Self {
        let timing = (!cold).then(|| {
            let mut timing = Timing::default();
            timing.head(stop, permit.admitted(), || now);
            timing
        });
        Self {
            permit,
            stop,
            timing,
        }
    }
}

impl Complete for Record {
    fn frame(&mut self, chunks: u32) {
        if let Some(timing) = &mut self.timing {
            let admitted = self.permit.admitted();
            timing.frame(self.stop, false, admitted, Instant::now, chunks);
        }
    }

    fn complete(self, outcome: Outcome) {
        let now = Instant::now();
        let admitted = self.permit.admitted();
        let elapsed = self
            .timing
            .map(|timing| timing.latency(self.stop, now.saturating_duration_since(admitted)));
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
