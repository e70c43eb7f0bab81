//! The response body wrapper whose end is the request's completion.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::guard::Guard;
use crate::classify::{Classified, ClassifyEos, GrpcEosErrorsAsFailures, Outcome};

/// The head's verdict: an outcome, or gRPC's status still to come in the
/// trailers.
pub(crate) type Verdict = Classified<GrpcEosErrorsAsFailures>;

/// What the end of a response records: the outcome its head gave (or, for
/// gRPC without a status in the head, its trailers give), unless the body
/// fails. Recorded when the body ends, fails or is dropped — a response
/// whose head decided is an outcome even if the caller never reads its
/// body (a 503 must count whether or not it is read).
#[derive(Debug)]
struct Completion {
    guard: Option<Guard>,
    verdict: Verdict,
}

impl Completion {
    fn fail(mut self) {
        if let Some(guard) = self.guard.take() {
            guard.finish(Outcome::Failure);
        }
    }

    /// The body's last frame: the trailers, if it held them.
    fn end(mut self, trailers: Option<&HeaderMap>) {
        if let Some(guard) = self.guard.take() {
            guard.finish(at_end(self.verdict, trailers));
        }
    }
}

/// The outcome of a body that ended, with `trailers` if its last frame
/// held them.
fn at_end(verdict: Verdict, trailers: Option<&HeaderMap>) -> Outcome {
    match verdict {
        Classified::Ready(outcome) => outcome,
        Classified::AtEnd(eos) => eos.classify_eos(trailers),
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take() {
            guard.finish(match self.verdict {
                Classified::Ready(outcome) => outcome,
                // Dropped before its status came: the caller hung up.
                Classified::AtEnd(_) => Outcome::Ignored,
            });
        }
    }
}

pin_project! {
    /// Response body returned by the balancer: the backend's body, unchanged,
    /// with the request's completion recorded when it ends: its last frame
    /// (under [`Classification::GrpcStatus`](super::Classification), the
    /// trailers' `grpc-status` decides when the head had none), or an
    /// error (a failure whatever the status), or its drop (the status
    /// decides: 5xx fail, 429 is an overload, other 4xx are ignored, the
    /// rest succeed; a gRPC status still to come is ignored). Until then
    /// the request counts as in flight.
    #[derive(Debug)]
    pub struct ResponseBody<B> {
        #[pin]
        inner: B,
        completion: Option<Completion>,
    }
}

impl<B: Body> ResponseBody<B> {
    #[inline]
    pub(crate) fn new(inner: B, guard: Guard, verdict: Verdict) -> Self {
        if inner.is_end_stream() {
            // An empty body has ended already, without trailers: record
            // now (the guard finishes where it is, never moved into a
            // completion first).
            guard.finish(at_end(verdict, None));
            return Self {
                inner,
                completion: None,
            };
        }
        let completion = Some(Completion {
            guard: Some(guard),
            verdict,
        });
        Self { inner, completion }
    }
}

impl<B> ResponseBody<B> {
    /// The backend's body.
    pub fn get_ref(&self) -> &B {
        &self.inner
    }

    /// The backend's body, unwrapped: the request completes now, with the
    /// outcome its head gave (a gRPC status still to come: ignored).
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
            None => {
                if let Some(completion) = this.completion.take() {
                    completion.end(None);
                }
            }
            Some(Ok(frame)) => {
                let trailers = frame.trailers_ref();
                if trailers.is_some() || this.inner.is_end_stream() {
                    if let Some(completion) = this.completion.take() {
                        completion.end(trailers);
                    }
                }
            }
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
