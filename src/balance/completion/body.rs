//! The response body wrapper whose end is the request's completion.

use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::balance::completion::guard::Guard;
use crate::classify::body::{Complete, CompletionBody};
use crate::classify::{Classified, ClassifierEos, Outcome};

/// The head's verdict: an outcome, or gRPC's status still to come in the
/// trailers.
pub(crate) type Verdict = Classified<ClassifierEos>;

/// The end of a response records the outcome its head gave (or, for gRPC
/// without a status in the head, its trailers give), unless the body
/// fails. Recorded when the body ends, fails or is dropped — a response
/// whose head decided is an outcome even if the caller never reads its
/// body (a 503 must count whether or not it is read).
impl Complete for Guard {
    fn complete(self, outcome: Outcome) {
        self.finish(outcome);
    }
}

pin_project! {
    /// Response body returned by the balancer: the backend's body, unchanged,
    /// with the request's completion recorded when it ends: its last frame
    /// (under [`Classifier::grpc`](crate::classify::Classifier::grpc), the
    /// trailers' `grpc-status` decides when the head had none), or an
    /// error (a failure whatever the status), or its drop (the status
    /// decides: 5xx fail, 429 is an overload, other 4xx are ignored, the
    /// rest succeed; a gRPC status still to come is ignored). Until then
    /// the request counts as in flight.
    #[derive(Debug)]
    pub struct ResponseBody<B> {
        #[pin]
        inner: CompletionBody<B, ClassifierEos, Guard>,
    }
}

impl<B: Body> ResponseBody<B> {
    #[inline]
    pub(crate) fn new(inner: B, guard: Guard, verdict: Verdict) -> Self {
        // An empty body has ended already, without trailers: the guard
        // finishes at once, where it is.
        Self {
            inner: CompletionBody::new(inner, guard, verdict),
        }
    }
}

impl<B> ResponseBody<B> {
    /// The backend's body.
    pub fn get_ref(&self) -> &B {
        self.inner.get_ref()
    }

    /// The backend's body, unwrapped: the request completes now, with the
    /// outcome its head gave (a gRPC status still to come: ignored).
    pub fn into_inner(self) -> B {
        self.inner.into_inner()
    }
}

impl<B: Body> Body for ResponseBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    #[inline]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        self.project().inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
