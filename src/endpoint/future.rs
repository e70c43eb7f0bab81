//! The response future of [`ReqwestEndpoint`](super::ReqwestEndpoint)
//! (named as tower names a middleware's future:
//! `endpoint::future::ResponseFuture`).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tower_service::Service;

/// The future `reqwest::Client` itself returns for a request.
type Pending = <reqwest::Client as Service<reqwest::Request>>::Future;

pin_project! {
    /// [`ReqwestEndpoint`](super::ReqwestEndpoint)'s response future:
    /// reqwest's own, its response converted into an
    /// `http::Response<reqwest::Body>`; or the error converting the
    /// request, at once.
    pub struct ResponseFuture {
        #[pin]
        state: State,
    }
}

pin_project! {
    /// Where a [`ResponseFuture`] is.
    #[project = StateProj]
    enum State {
        /// Sent: reqwest's own future.
        Sending { #[pin] pending: Pending },
        /// The request could not be converted; the error, until polled.
        Failed { error: Option<reqwest::Error> },
    }
}

impl ResponseFuture {
    /// The request sent: reqwest's future.
    pub(crate) fn sending(pending: Pending) -> Self {
        Self {
            state: State::Sending { pending },
        }
    }

    /// The request not sent: its conversion's error.
    pub(crate) fn failed(error: reqwest::Error) -> Self {
        Self {
            state: State::Failed { error: Some(error) },
        }
    }
}

impl Future for ResponseFuture {
    type Output = Result<http::Response<reqwest::Body>, reqwest::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Sending { pending } => pending.poll(cx).map_ok(Into::into),
            StateProj::Failed { error } => match error.take() {
                Some(error) => Poll::Ready(Err(error)),
                None => panic!("`ResponseFuture` polled after completion"),
            },
        }
    }
}

impl fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
