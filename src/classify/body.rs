//! One completion-tracking response body, for every middleware that
//! records a call's outcome when its response body ends: the breaker
//! (its permit) and the balancer (its guard).
//!
//! A [`CompletionBody`] passes the inner body through unchanged and hands
//! the call's outcome, once, to a [`Complete`] receiver:
//!
//! | how the body ends | outcome |
//! |---|---|
//! | empty from the start (`is_end_stream`) | at once, as at its last frame without trailers |
//! | its last frame (`is_end_stream` after it), or `None` | the head's verdict; a deferred one reads no trailers |
//! | a trailers frame | the head's verdict; a deferred one reads these trailers |
//! | a body error | [`Outcome::Failure`], whatever the head said |
//! | dropped (or unwrapped) before its end | the head's verdict; a deferred one is [`Outcome::Ignored`] (the caller hung up before the status came) |
//! | dropped after its end | nothing more |
//!
//! A server-sent-event stream whose head succeeded (scanned, see
//! [`sse`](super::sse)) fails instead if an error event came, or if it
//! ended (last frame, `None` or trailers) before `data: [DONE]`; dropped
//! before its end, it fails only if an error event came.
//!
//! No allocation; the receiver is told of each frame (for a clock that
//! stops at the first, or gaps between frames) before the outcome.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::outcome::Outcome;
use super::sse::SseScan;
use super::traits::{Classified, ClassifyEos};

pub(crate) use self::receiver::Complete;

mod receiver {
    use crate::classify::outcome::Outcome;

    /// What receives a call's outcome at the end of its response body:
    /// the breaker's permit, the balancer's [`Guard`](crate::balance::Guard).
    /// Implemented inside the crate only (it is not nameable outside).
    pub trait Complete {
        /// The response's head says it is an event stream
        /// (`text/event-stream`): its frames are scanned for `data:`
        /// events. Called before any frame.
        fn event_stream(&mut self) {}

        /// A frame of the body arrived that carries `chunks` of the answer
        /// (at least one): any frame of a body that is not scanned, a frame
        /// ending `chunks` `data:` events of a scanned event stream (its
        /// comments, `[DONE]` and error events are no chunks). Called up to
        /// the end, before [`complete`](Self::complete); a receiver whose
        /// clock stops at the first keeps the first.
        fn frame(&mut self, chunks: u32) {
            let _ = chunks;
        }

        /// A frame of the body carried `bytes` of data (the first contiguous
        /// run of it); called before [`frame`](Self::frame).
        fn data(&mut self, bytes: &[u8]) {
            let _ = bytes;
        }

        /// The body ended (its last frame, trailers, an error), rather than
        /// being dropped; called once, just before
        /// [`complete`](Self::complete).
        fn ended(&mut self) {}

        /// The call's outcome: called once, when the body ends, fails or is
        /// dropped.
        fn complete(self, outcome: Outcome);
    }
}

/// The outcome of a body that ended, with `trailers` if it had them.
pub(crate) fn at_end<Eos: ClassifyEos>(
    verdict: Classified<Eos>,
    trailers: Option<&HeaderMap>,
) -> Outcome {
    match verdict {
        Classified::Ready(outcome) => outcome,
        Classified::AtEnd(eos) => eos.classify_eos(trailers),
    }
}

/// The receiver and the head's verdict, until the body ends; records on
/// drop if it has not. `scan`: an event stream's scan, while the head
/// called it a success.
#[derive(Debug)]
struct Pending<Eos, R: Complete> {
    open: Option<(R, Classified<Eos>)>,
    scan: Option<SseScan>,
}

impl<Eos, R: Complete> Pending<Eos, R> {
    fn frame<D: bytes::Buf>(&mut self, data: Option<&D>) {
        if let (Some((receiver, _)), Some(data)) = (&mut self.open, data) {
            receiver.data(data.chunk());
        }
        let chunks = match (&mut self.scan, data) {
            (Some(scan), Some(data)) => {
                let before = scan.events();
                scan.frame(data);
                scan.events() - before
            }
            // An event stream's trailers carry no chunk.
            (Some(_), None) => 0,
            (None, _) => 1,
        };
        if let (Some((receiver, _)), true) = (&mut self.open, chunks > 0) {
            receiver.frame(chunks);
        }
    }

    /// Records the outcome `outcome_of` the verdict gives, once; at the
    /// body's `end`, a scanned stream's failure overrides it.
    fn settle(&mut self, end: bool, outcome_of: impl FnOnce(Classified<Eos>) -> Outcome) {
        if let Some((mut receiver, verdict)) = self.open.take() {
            if end {
                receiver.ended();
            }
            let outcome = outcome_of(verdict);
            let failed = match self.scan.as_mut() {
                Some(scan) if end => scan.failed_at_end(),
                Some(scan) => scan.errored(),
                None => false,
            };
            let outcome = match outcome {
                Outcome::Success if failed => Outcome::Failure,
                outcome => outcome,
            };
            receiver.complete(outcome);
        }
    }

    fn is_settled(&self) -> bool {
        self.open.is_none()
    }
}

impl<Eos, R: Complete> Drop for Pending<Eos, R> {
    fn drop(&mut self) {
        self.settle(false, |verdict| match verdict {
            Classified::Ready(outcome) => outcome,
            // Dropped before its status came: the caller hung up.
            Classified::AtEnd(_) => Outcome::Ignored,
        });
    }
}

pin_project! {
    /// A response body whose end is its call's completion: the inner body,
    /// unchanged, with the outcome recorded when it ends — by the breaker
    /// ([`breaker::ResponseBody`](crate::breaker::ResponseBody)) or the
    /// balancer ([`balance::ResponseBody`](crate::balance::ResponseBody)),
    /// `R` being what records it.
    ///
    /// | how the body ends | outcome |
    /// |---|---|
    /// | empty from the start (`is_end_stream`) | at once, as at its last frame without trailers |
    /// | its last frame (`is_end_stream` after it), or `None` | the head's verdict; a deferred one reads no trailers |
    /// | a trailers frame | the head's verdict; a deferred one (gRPC's status) reads these trailers |
    /// | a body error | a failure, whatever the head said |
    /// | dropped (or unwrapped) before its end | the head's verdict; a deferred one is ignored (the caller hung up before the status came) |
    /// | dropped after its end | nothing more |
    ///
    /// An event stream whose head succeeded fails if an error event came
    /// or (at its end) no `data: [DONE]` did. Until then the call is in
    /// flight. No allocation.
    #[derive(Debug)]
    pub struct CompletionBody<B, Eos, R: Complete> {
        #[pin]
        inner: B,
        pending: Pending<Eos, R>,
    }
}

impl<B: Body, Eos: ClassifyEos, R: Complete> CompletionBody<B, Eos, R> {
    /// `inner`, whose head gave `verdict`, completing to `receiver`;
    /// `events`: the head said `text/event-stream`, so a success is
    /// checked against the events (see the [module docs](self)). An empty
    /// body completes now.
    #[inline]
    pub(crate) fn new(inner: B, receiver: R, verdict: Classified<Eos>, events: bool) -> Self {
        let success = matches!(verdict, Classified::Ready(Outcome::Success));
        let scan = (events && success).then(SseScan::new);
        let mut pending = Pending {
            open: Some((receiver, verdict)),
            scan,
        };
        if inner.is_end_stream() {
            pending.settle(true, |verdict| at_end(verdict, None));
        }
        Self { inner, pending }
    }
}

impl<B, Eos, R: Complete> CompletionBody<B, Eos, R> {
    /// The inner body.
    pub fn get_ref(&self) -> &B {
        &self.inner
    }

    /// The inner body, unwrapped: the call completes now, as if the body
    /// were dropped.
    pub fn into_inner(self) -> B {
        self.inner
    }
}

impl<B: Body, Eos: ClassifyEos, R: Complete> Body for CompletionBody<B, Eos, R> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        let frame = ready!(this.inner.as_mut().poll_frame(cx));
        if this.pending.is_settled() {
            return Poll::Ready(frame);
        }
        match &frame {
            Some(Ok(frame)) => {
                this.pending.frame(frame.data_ref());
                let trailers = frame.trailers_ref();
                if trailers.is_some() || this.inner.is_end_stream() {
                    this.pending
                        .settle(true, |verdict| at_end(verdict, trailers));
                }
            }
            Some(Err(_)) => this.pending.settle(true, |_| Outcome::Failure),
            None => this.pending.settle(true, |verdict| at_end(verdict, None)),
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

#[cfg(test)]
mod tests;
