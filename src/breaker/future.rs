//! The breaker's response future: what [`CircuitBreaker`](super::CircuitBreaker)'s
//! `call` returns, to name in a type that stores one.
//!
//! ```
//! use tower::{service_fn, Layer, Service, ServiceExt};
//! use tower_model_balance::breaker::future::ResponseFuture;
//! use tower_model_balance::breaker::{CircuitBreakerLayer, BreakerConfig};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let backend = service_fn(|_req: http::Request<()>| async {
//!     Ok::<_, std::io::Error>(http::Response::new(String::from("ok")))
//! });
//! let mut breaker = CircuitBreakerLayer::new(BreakerConfig::default()).layer(backend);
//! let future: ResponseFuture<_, _> = breaker.ready().await.unwrap().call(http::Request::new(()));
//! assert_eq!(future.await.unwrap().status(), 200);
//! # }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use tokio::time::Instant;

use super::body::{Record, ResponseBody};
use super::{Permit, StopPoint};
use crate::classify::Classify;
use crate::error::{BoxError, BreakerOpen};

pin_project! {
    /// Response future of [`CircuitBreaker`](super::CircuitBreaker): the
    /// inner future with the call's permit, or a fast failure. Dropped
    /// before it resolves, it gives the permit back uncounted; an error
    /// is recorded as its classifier says; a response hands the permit on
    /// to its [`ResponseBody`], which records at the body's end.
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
        Called {
            #[pin]
            future: F,
            permit: Option<Permit>,
            classifier: C,
            stop: StopPoint,
        },
        Failed { error: Option<BreakerOpen> },
    }
}

impl<F, C> ResponseFuture<F, C> {
    pub(super) fn new(future: F, permit: Permit, classifier: C, stop: StopPoint) -> Self {
        Self {
            state: State::Called {
                future,
                permit: Some(permit),
                classifier,
                stop,
            },
        }
    }

    pub(super) fn failed(error: BreakerOpen) -> Self {
        Self {
            state: State::Failed { error: Some(error) },
        }
    }
}

impl<F, C, B, E> Future for ResponseFuture<F, C>
where
    F: Future<Output = Result<http::Response<B>, E>>,
    E: Into<BoxError>,
    C: Classify<http::Response<B>, E>,
    B: http_body::Body,
{
    type Output = Result<http::Response<ResponseBody<B, C::Eos>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Called {
                future,
                permit,
                classifier,
                stop,
            } => {
                let result = ready!(future.poll(cx));
                let Some(permit) = permit.take() else {
                    return Poll::Ready(Err("response future polled after completion".into()));
                };
                Poll::Ready(match result {
                    Ok(response) => {
                        let cold = classifier.is_cold_load(&response);
                        let classified = classifier.classify_response(&response);
                        let record = Record::new(permit, *stop, cold, Instant::now());
                        Ok(response.map(|body| ResponseBody::new(body, record, classified)))
                    }
                    Err(error) => {
                        permit.record(classifier.classify_error(&error));
                        Err(error.into())
                    }
                })
            }
            StateProj::Failed { error } => {
                let error = error.take().unwrap_or_default();
                Poll::Ready(Err(error.into()))
            }
        }
    }
}
