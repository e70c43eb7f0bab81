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

use super::body::Record;
use super::shared::permit::Permit;
use crate::classify::completion::TrackCompletion;
use crate::classify::timing::StopPoint;
use crate::classify::{AtEndOfBody, Classify};
use crate::error::{BoxError, BreakerOpen, NotReady};

pin_project! {
    /// Response future of [`CircuitBreaker`](super::CircuitBreaker): the
    /// inner future with the call's permit, or a fast failure. Dropped
    /// before it resolves, it gives the permit back uncounted; an error
    /// is recorded as its classifier says; a response hands the permit on
    /// to its [`ResponseBody`](super::ResponseBody), which records at the
    /// body's end (`K` = [`AtEndOfBody`]), or records at once
    /// ([`AtResponse`](crate::classify::AtResponse)).
    #[derive(Debug)]
    pub struct ResponseFuture<F, C, K = AtEndOfBody> {
        #[pin]
        state: State<F, C>,
        track: K,
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
        Failed { error: Option<BoxError> },
    }
}

impl<F, C, K> ResponseFuture<F, C, K> {
    pub(super) fn new(future: F, permit: Permit, classifier: C, stop: StopPoint, track: K) -> Self {
        Self {
            state: State::Called {
                future,
                permit: Some(permit),
                classifier,
                stop,
            },
            track,
        }
    }

    pub(super) fn failed(error: BreakerOpen, track: K) -> Self {
        Self {
            state: State::Failed {
                error: Some(error.into()),
            },
            track,
        }
    }

    pub(super) fn not_ready(track: K) -> Self {
        Self {
            state: State::Failed {
                error: Some(NotReady.into()),
            },
            track,
        }
    }
}

impl<F, C, K, T, E> Future for ResponseFuture<F, C, K>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
    C: Classify<T, E>,
    K: TrackCompletion<T, C::Eos, Record>,
{
    type Output = Result<K::Output, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        match this.state.project() {
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
                        Ok(this.track.track_completion(response, record, classified))
                    }
                    Err(error) => {
                        permit.record(classifier.classify_error(&error));
                        Err(error.into())
                    }
                })
            }
            StateProj::Failed { error } => {
                let error = error
                    .take()
                    .unwrap_or_else(|| BreakerOpen::default().into());
                Poll::Ready(Err(error))
            }
        }
    }
}
