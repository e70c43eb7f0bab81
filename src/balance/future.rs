//! The balancer's response future.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll, Waker};

use pin_project_lite::pin_project;
use tower_service::Service;

use super::body::ResponseBody;
use super::guard::Guard;
use crate::breaker::{Outcome, ServerErrorsAsFailures};
use crate::error::BoxError;

pin_project! {
    /// Response future of [`ModelBalancer`](super::ModelBalancer): the
    /// endpoint's call to the picked backend, or an immediate typed error
    /// (`InvalidRoute`, `NoHealthyBackend`).
    ///
    /// The endpoint is called at once when it is ready (the common case:
    /// hyper-util's pooled client always is); otherwise the endpoint and
    /// the request wait in one heap cell until it is, so the future stays
    /// the size of the endpoint's own.
    pub struct ResponseFuture<E, Req>
    where
        E: Service<Req>,
    {
        #[pin]
        state: State<E, Req>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<E, Req>
    where
        E: Service<Req>,
    {
        Called { #[pin] future: E::Future, guard: Option<Guard> },
        Waiting { waiting: Option<Box<(E, Req)>>, guard: Option<Guard> },
        Failed { error: Option<BoxError> },
    }
}

impl<E, Req> ResponseFuture<E, Req>
where
    E: Service<Req>,
    E::Error: Into<BoxError>,
{
    /// Calls `endpoint` with `req` if it is ready now; else keeps both
    /// until the first poll finds it ready. An endpoint that fails its
    /// readiness fails the request.
    pub(crate) fn new(mut endpoint: E, req: Req, guard: Guard) -> Self {
        let state = match endpoint.poll_ready(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(Ok(())) => State::Called {
                future: endpoint.call(req),
                guard: Some(guard),
            },
            Poll::Ready(Err(error)) => {
                guard.finish(Outcome::Failure);
                State::Failed {
                    error: Some(error.into()),
                }
            }
            Poll::Pending => State::Waiting {
                waiting: Some(Box::new((endpoint, req))),
                guard: Some(guard),
            },
        };
        Self { state }
    }

    pub(crate) fn failed(error: BoxError) -> Self {
        Self {
            state: State::Failed { error: Some(error) },
        }
    }
}

impl<E, Req> std::fmt::Debug for ResponseFuture<E, Req>
where
    E: Service<Req>,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Called { .. } => "called",
            State::Waiting { .. } => "waiting for the endpoint",
            State::Failed { .. } => "failed",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}

const POLLED_AFTER_COMPLETION: &str = "response future polled after completion";

impl<E, Req, B> Future for ResponseFuture<E, Req>
where
    E: Service<Req, Response = http::Response<B>>,
    E::Error: Into<BoxError>,
    B: http_body::Body,
{
    type Output = Result<http::Response<ResponseBody<B>>, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let mut state = self.as_mut().project().state;
            match state.as_mut().project() {
                StateProj::Called { future, guard } => {
                    let result = ready!(future.poll(cx));
                    let Some(guard) = guard.take() else {
                        return Poll::Ready(Err(POLLED_AFTER_COMPLETION.into()));
                    };
                    return Poll::Ready(match result {
                        Ok(response) => {
                            guard.read_residency(response.headers());
                            let outcome =
                                ServerErrorsAsFailures::classify_status(response.status());
                            Ok(response.map(|body| ResponseBody::new(body, guard, outcome)))
                        }
                        Err(error) => {
                            guard.finish(Outcome::Failure);
                            Err(error.into())
                        }
                    });
                }
                StateProj::Waiting { waiting, guard } => {
                    let Some(cell) = waiting.as_mut() else {
                        return Poll::Ready(Err(POLLED_AFTER_COMPLETION.into()));
                    };
                    let ready = ready!(cell.0.poll_ready(cx));
                    let (Some((mut endpoint, req)), Some(guard)) =
                        (waiting.take().map(|cell| *cell), guard.take())
                    else {
                        return Poll::Ready(Err(POLLED_AFTER_COMPLETION.into()));
                    };
                    if let Err(error) = ready {
                        guard.finish(Outcome::Failure);
                        return Poll::Ready(Err(error.into()));
                    }
                    let future = endpoint.call(req);
                    state.set(State::Called {
                        future,
                        guard: Some(guard),
                    });
                }
                StateProj::Failed { error } => {
                    return Poll::Ready(Err(error
                        .take()
                        .unwrap_or_else(|| POLLED_AFTER_COMPLETION.into())))
                }
            }
        }
    }
}
