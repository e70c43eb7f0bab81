//! The response body wrapper whose end is the request's completion.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::table::BackendState;
use crate::breaker::{Outcome, Permit};

/// One request in flight on a backend: counted from the pick until the end
/// of the response body (or until dropped), holding the breaker permit.
#[derive(Debug)]
pub(crate) struct InFlight {
    state: Arc<BackendState>,
    permit: Option<Permit>,
}

impl InFlight {
    pub(crate) fn new(state: Arc<BackendState>, permit: Permit) -> Self {
        state.in_flight.fetch_add(1, Ordering::Relaxed);
        state.fleet_in_flight.fetch_add(1, Ordering::Relaxed);
        state.picked.fetch_add(1, Ordering::Relaxed);
        Self {
            state,
            permit: Some(permit),
        }
    }

    /// Records the outcome; the in-flight count drops with `self`.
    pub(crate) fn finish(mut self, outcome: Outcome) {
        if let Some(permit) = self.permit.take() {
            permit.record(outcome);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.state.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.state.fleet_in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

pin_project! {
    /// Response body returned by the balancer: the backend's body, unchanged,
    /// with the request's completion recorded when it ends (its last frame,
    /// or an error). Dropped before its end, the request counts as cancelled:
    /// its in-flight slot and breaker permit come back, nothing is recorded.
    #[derive(Debug)]
    pub struct ResponseBody<B> {
        #[pin]
        inner: B,
        completion: Option<(InFlight, Outcome)>,
    }
}

impl<B: Body> ResponseBody<B> {
    pub(crate) fn new(inner: B, guard: InFlight, outcome: Outcome) -> Self {
        let mut body = Self {
            inner,
            completion: Some((guard, outcome)),
        };
        if body.inner.is_end_stream() {
            body.finish(None);
        }
        body
    }

    fn finish(&mut self, failed: Option<Outcome>) {
        if let Some((guard, outcome)) = self.completion.take() {
            guard.finish(failed.unwrap_or(outcome));
        }
    }
}

impl<B> ResponseBody<B> {
    /// The backend's body.
    pub fn get_ref(&self) -> &B {
        &self.inner
    }

    /// The backend's body, unwrapped: the request stops being tracked (as
    /// if its body were dropped before its end — nothing is recorded).
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
        let end = match &frame {
            None => Some(None),
            Some(Err(_)) => Some(Some(Outcome::Failure)),
            Some(Ok(_)) if this.inner.is_end_stream() => Some(None),
            Some(Ok(_)) => None,
        };
        if let Some(failed) = end {
            if let Some((guard, outcome)) = this.completion.take() {
                guard.finish(failed.unwrap_or(outcome));
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
