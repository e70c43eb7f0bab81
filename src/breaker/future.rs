//! The breaker's response future.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;

use super::{Classify, Permit};
use crate::error::{BoxError, BreakerOpen};

pin_project! {
    /// Response future of [`CircuitBreaker`](super::CircuitBreaker): the
    /// inner future with the call's permit, or a fast failure. Dropped
    /// before it resolves, it gives the permit back uncounted.
    #[derive(Debug)]
    pub struct ResponseFuture<F, C> {
        #[pin]
        state: State<F, C>,
    }
}

pin_project! {
    #[project = StateProj]
    #[derive(Debug)]
    enum State<F, C> {
        Called { #[pin] future: F, permit: Option<Permit>, classifier: C },
        Failed { error: Option<BreakerOpen> },
    }
}

impl<F, C> ResponseFuture<F, C> {
    pub(super) fn new(future: F, permit: Permit, classifier: C) -> Self {
        Self {
            state: State::Called {
                future,
                permit: Some(permit),
                classifier,
            },
        }
    }

    pub(super) fn failed(error: BreakerOpen) -> Self {
        Self {
            state: State::Failed { error: Some(error) },
        }
    }
}

impl<F, C, T, E> Future for ResponseFuture<F, C>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
    C: Classify<T, E>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Called {
                future,
                permit,
                classifier,
            } => {
                let result = ready!(future.poll(cx));
                if let Some(permit) = permit.take() {
                    permit.record(classifier.classify(result.as_ref()));
                }
                Poll::Ready(result.map_err(Into::into))
            }
            StateProj::Failed { error } => {
                let error = error.take().unwrap_or_default();
                Poll::Ready(Err(error.into()))
            }
        }
    }
}
