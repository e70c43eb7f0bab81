//! The balancer's response future.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;

use super::body::ResponseBody;
use super::guard::Guard;
use crate::breaker::{Outcome, ServerErrorsAsFailures};
use crate::error::BoxError;

pin_project! {
    /// Response future of [`ModelBalancer`](super::ModelBalancer): the
    /// endpoint's call to the picked backend, or an immediate typed error
    /// (`InvalidRoute`, `NoHealthyBackend`).
    #[derive(Debug)]
    pub struct ResponseFuture<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project! {
    #[project = StateProj]
    #[derive(Debug)]
    enum State<F> {
        Called { #[pin] future: F, guard: Option<Guard> },
        Failed { error: Option<BoxError> },
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn new(future: F, guard: Guard) -> Self {
        Self {
            state: State::Called {
                future,
                guard: Some(guard),
            },
        }
    }

    pub(crate) fn failed(error: BoxError) -> Self {
        Self {
            state: State::Failed { error: Some(error) },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<http::Response<B>, E>>,
    B: http_body::Body,
    E: Into<BoxError>,
{
    type Output = Result<http::Response<ResponseBody<B>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Called { future, guard } => {
                let result = ready!(future.poll(cx));
                let Some(guard) = guard.take() else {
                    return Poll::Ready(Err("response future polled after completion".into()));
                };
                Poll::Ready(match result {
                    Ok(response) => {
                        let outcome = ServerErrorsAsFailures::classify_status(response.status());
                        Ok(response.map(|body| ResponseBody::new(body, guard, outcome)))
                    }
                    Err(error) => {
                        guard.finish(Outcome::Failure);
                        Err(error.into())
                    }
                })
            }
            StateProj::Failed { error } => Poll::Ready(Err(error
                .take()
                .unwrap_or_else(|| "response future polled after completion".into()))),
        }
    }
}
