//! The breaker's response body: the call's outcome is recorded when the
//! body ends.

use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::Instant;

use super::{Classified, ClassifyEos, Outcome, Permit};

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

/// How the body ended, as far as the outcome goes.
#[derive(Debug)]
enum End<'a> {
    /// Its last frame, with the trailers if that frame held them.
    Eos(Option<&'a http::HeaderMap>),
    /// An error: the call failed, whatever its status.
    Error,
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

/// What the end of the body records. Recorded once, when the body ends,
/// fails or is dropped.
#[derive(Debug)]
pub(super) struct Record<Eos> {
    permit: Option<Permit>,
    classified: Option<Classified<Eos>>,
    clock: Clock,
}

impl<Eos: ClassifyEos> Record<Eos> {
    /// The record of a response whose head arrived at `now`: `classified`
    /// by its head; a `cold` load is untimed.
    pub(super) fn new(
        permit: Permit,
        classified: Classified<Eos>,
        stop: StopPoint,
        cold: bool,
        now: Instant,
    ) -> Self {
        let clock = match stop {
            _ if cold => Clock::Stopped(None),
            StopPoint::Headers => {
                Clock::Stopped(Some(now.saturating_duration_since(permit.admitted())))
            }
            StopPoint::FirstFrame => Clock::UntilFirstFrame,
            StopPoint::EndOfBody => Clock::UntilEnd,
        };
        Self {
            permit: Some(permit),
            classified: Some(classified),
            clock,
        }
    }

    fn first_frame(&mut self) {
        if let (Clock::UntilFirstFrame, Some(permit)) = (self.clock, &self.permit) {
            let elapsed = Instant::now().saturating_duration_since(permit.admitted());
            self.clock = Clock::Stopped(Some(elapsed));
        }
    }

    fn finish(&mut self, end: End<'_>) {
        self.settle(|classified| match (end, classified) {
            (End::Error, _) => Outcome::Failure,
            (_, Classified::Ready(outcome)) => outcome,
            (End::Eos(trailers), Classified::AtEnd(eos)) => eos.classify_eos(trailers),
        });
    }
}

impl<Eos> Record<Eos> {
    /// Records the outcome `outcome_of` the head's classification, once.
    fn settle(&mut self, outcome_of: impl FnOnce(Classified<Eos>) -> Outcome) {
        let (Some(permit), Some(classified)) = (self.permit.take(), self.classified.take()) else {
            return;
        };
        let outcome = outcome_of(classified);
        let now = Instant::now();
        let elapsed = match self.clock {
            Clock::Stopped(elapsed) => elapsed,
            Clock::UntilFirstFrame | Clock::UntilEnd => {
                Some(now.saturating_duration_since(permit.admitted()))
            }
        };
        permit.record_call(outcome, elapsed, now);
    }
}

impl<Eos> Drop for Record<Eos> {
    fn drop(&mut self) {
        // As `finish(End::Dropped)`, without the `ClassifyEos` bound: a
        // deferred outcome is not read on a drop.
        self.settle(|classified| match classified {
            Classified::Ready(outcome) => outcome,
            Classified::AtEnd(_) => Outcome::Ignored,
        });
    }
}

pin_project! {
    /// Response body of [`CircuitBreaker`](super::CircuitBreaker): the inner
    /// body, unchanged, with the call's outcome recorded when it ends —
    /// its last frame (a deferred outcome reads the trailers), an error (a
    /// failure whatever the status), or its drop (the status decides; a
    /// response whose head arrived is an outcome even if its body is never
    /// read). A body that is empty (`is_end_stream`) from the start records
    /// at once. Until then the call is in flight: a half-open probe's
    /// permit stays out. No allocation.
    #[derive(Debug)]
    pub struct ResponseBody<B, Eos> {
        #[pin]
        inner: B,
        record: Option<Record<Eos>>,
    }
}

impl<B: Body, Eos: ClassifyEos> ResponseBody<B, Eos> {
    pub(super) fn new(inner: B, mut record: Record<Eos>) -> Self {
        let record = if inner.is_end_stream() {
            record.finish(End::Eos(None));
            None
        } else {
            Some(record)
        };
        Self { inner, record }
    }
}

impl<B, Eos> ResponseBody<B, Eos> {
    /// The inner body.
    pub fn get_ref(&self) -> &B {
        &self.inner
    }

    /// The inner body, unwrapped: the call ends now, as if the body were
    /// dropped.
    pub fn into_inner(self) -> B {
        self.inner
    }
}

impl<B: Body, Eos: ClassifyEos> Body for ResponseBody<B, Eos> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        let frame = ready!(this.inner.as_mut().poll_frame(cx));
        let Some(record) = this.record.as_mut() else {
            return Poll::Ready(frame);
        };
        let end = match &frame {
            Some(Ok(frame)) => {
                record.first_frame();
                match frame.trailers_ref() {
                    Some(trailers) => Some(End::Eos(Some(trailers))),
                    None if this.inner.is_end_stream() => Some(End::Eos(None)),
                    None => None,
                }
            }
            Some(Err(_)) => Some(End::Error),
            None => Some(End::Eos(None)),
        };
        if let Some(end) = end {
            record.finish(end);
            *this.record = None;
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
