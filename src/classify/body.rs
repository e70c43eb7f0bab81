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
//! No allocation; the receiver is told of the first frame (for a clock
//! that stops there) before the outcome.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::{Classified, ClassifyEos, Outcome};

pub(crate) use self::receiver::Complete;

mod receiver {
    use crate::classify::Outcome;

    /// What receives a call's outcome at the end of its response body:
    /// the breaker's permit, the balancer's [`Guard`](crate::balance::Guard).
    /// Implemented inside the crate only (it is not nameable outside).
    pub trait Complete {
        /// The body's first frame (data or trailers) arrived; called before
        /// [`complete`](Self::complete), for the first frame only or for
        /// every frame up to the end (the receiver keeps the first).
        fn first_frame(&mut self) {}

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
/// drop if it has not.
#[derive(Debug)]
struct Pending<Eos, R: Complete>(Option<(R, Classified<Eos>)>);

impl<Eos, R: Complete> Pending<Eos, R> {
    fn first_frame(&mut self) {
        if let Some((receiver, _)) = &mut self.0 {
            receiver.first_frame();
        }
    }

    /// Records the outcome `outcome_of` the verdict gives, once.
    fn settle(&mut self, outcome_of: impl FnOnce(Classified<Eos>) -> Outcome) {
        if let Some((receiver, verdict)) = self.0.take() {
            receiver.complete(outcome_of(verdict));
        }
    }

    fn is_settled(&self) -> bool {
        self.0.is_none()
    }
}

impl<Eos, R: Complete> Drop for Pending<Eos, R> {
    fn drop(&mut self) {
        self.settle(|verdict| match verdict {
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
    /// Until then the call is in flight. No allocation.
    #[derive(Debug)]
    pub struct CompletionBody<B, Eos, R: Complete> {
        #[pin]
        inner: B,
        pending: Pending<Eos, R>,
    }
}

impl<B: Body, Eos: ClassifyEos, R: Complete> CompletionBody<B, Eos, R> {
    /// `inner`, whose head gave `verdict`, completing to `receiver`. An
    /// empty body completes now (the receiver is never moved into the
    /// body first).
    #[inline]
    pub(crate) fn new(inner: B, receiver: R, verdict: Classified<Eos>) -> Self {
        if inner.is_end_stream() {
            receiver.complete(at_end(verdict, None));
            return Self {
                inner,
                pending: Pending(None),
            };
        }
        Self {
            inner,
            pending: Pending(Some((receiver, verdict))),
        }
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
                this.pending.first_frame();
                let trailers = frame.trailers_ref();
                if trailers.is_some() || this.inner.is_end_stream() {
                    this.pending.settle(|verdict| at_end(verdict, trailers));
                }
            }
            Some(Err(_)) => this.pending.settle(|_| Outcome::Failure),
            None => this.pending.settle(|verdict| at_end(verdict, None)),
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
