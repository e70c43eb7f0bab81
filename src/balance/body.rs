//! The response body wrapper whose end is the request's completion.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::guard::Guard;
use crate::breaker::Outcome;

/// What the end of a response records: the outcome its status gave, unless
/// the body fails. Recorded when the body ends, fails or is dropped — a
/// response whose headers arrived is an outcome even if the caller never
/// reads its body (a 503 must count whether or not it is read).
#[derive(Debug)]
struct Completion {
    guard: Option<Guard>,
    outcome: Outcome,
}

impl Completion {
    fn fail(mut self) {
        if let Some(guard) = self.guard.take() {
            guard.finish(Outcome::Failure);
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take() {
            guard.finish(self.outcome);
        }
    }
}

pin_project! {
    /// Response body returned by the balancer: the backend's body, unchanged,
    /// with the request's completion recorded when it ends: its last frame,
    /// or an error (a failure whatever the status), or its drop (the
    /// status decides: 5xx fail, 429 is an overload, other 4xx are ignored, the rest
    /// succeed). Until then the request counts as in flight.
    #[derive(Debug)]
    pub struct ResponseBody<B> {
        #[pin]
        inner: B,
        completion: Option<Completion>,
    }
}

impl<B: Body> ResponseBody<B> {
    pub(crate) fn new(inner: B, guard: Guard, outcome: Outcome) -> Self {
        let ended = inner.is_end_stream();
        let completion = Completion {
            guard: Some(guard),
            outcome,
        };
        Self {
            inner,
            // An empty body has ended already: record now.
            completion: (!ended).then_some(completion),
        }
    }
}

impl<B> ResponseBody<B> {
    /// The backend's body.
    pub fn get_ref(&self) -> &B {
        &self.inner
    }

    /// The backend's body, unwrapped: the request completes now, with the
    /// outcome its status gave.
    pub fn into_inner(self) -> B {
        self.inner
    }
}

impl<B: Body> Body for ResponseBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        let frame = ready!(this.inner.as_mut().poll_frame(cx));
        match &frame {
            Some(Err(_)) => {
                if let Some(completion) = this.completion.take() {
                    completion.fail();
                }
            }
            None => *this.completion = None,
            Some(Ok(_)) if this.inner.is_end_stream() => *this.completion = None,
            Some(Ok(_)) => {}
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
