use std::task::{Context, Poll};

use tokio::time::Instant;
use tower_service::Service;

use super::future::ResponseFuture;
use super::{Breaker, Classify, ResponseBody, StopPoint};
use crate::error::{BoxError, BreakerOpen};

/// A service behind a circuit breaker; see the [module docs](super).
#[derive(Debug)]
pub struct CircuitBreaker<S, C> {
    inner: S,
    breaker: Breaker,
    classifier: C,
    ready: Ready,
    stop: StopPoint,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ready {
    /// `poll_ready` has not returned `Ready` since the last `call`.
    No,
    /// The inner service was driven to ready.
    Inner,
    /// The breaker was open: `call` fails fast.
    Shed,
}

impl<S, C> CircuitBreaker<S, C> {
    /// Wraps `inner` with `breaker`, classifying outcomes with `classifier`.
    pub fn new(inner: S, breaker: Breaker, classifier: C) -> Self {
        Self {
            inner,
            breaker,
            classifier,
            ready: Ready::No,
            stop: StopPoint::FirstFrame,
        }
    }

    /// Stops the slow-call clock at `stop` (default
    /// [`StopPoint::FirstFrame`]).
    pub fn with_stop_point(mut self, stop: StopPoint) -> Self {
        self.stop = stop;
        self
    }

    /// The breaker, to read its state or trips.
    pub fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Consumes the breaker, returning the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: Clone, C: Clone> Clone for CircuitBreaker<S, C> {
    /// Shares the breaker; the clone has not been polled ready.
    fn clone(&self) -> Self {
        Self::new(
            self.inner.clone(),
            self.breaker.clone(),
            self.classifier.clone(),
        )
        .with_stop_point(self.stop)
    }
}

impl<S, C, Req, B> Service<Req> for CircuitBreaker<S, C>
where
    S: Service<Req, Response = http::Response<B>>,
    S::Error: Into<BoxError>,
    C: Classify<http::Response<B>, S::Error> + Clone,
    B: http_body::Body,
{
    type Response = http::Response<ResponseBody<B, C::Eos>>;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if self.ready != Ready::No {
            return Poll::Ready(Ok(()));
        }
        if !self.breaker.admits(Instant::now()) {
            self.ready = Ready::Shed;
            return Poll::Ready(Ok(()));
        }
        match self.inner.poll_ready(cx) {
            Poll::Ready(Ok(())) => {
                self.ready = Ready::Inner;
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e.into())),
            Poll::Pending => Poll::Pending,
        }
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let ready = std::mem::replace(&mut self.ready, Ready::No);
        match (ready, self.breaker.try_acquire()) {
            (Ready::Inner, Ok(permit)) => {
                let classifier = self.classifier.clone();
                ResponseFuture::new(self.inner.call(req), permit, classifier, self.stop)
            }
            (_, Err(open)) => ResponseFuture::failed(open),
            // Admitted, but the inner service was not driven to ready (the
            // breaker left Open between `poll_ready` and `call`): never call
            // an unready service; the permit goes back uncounted.
            (_, Ok(_permit)) => ResponseFuture::failed(BreakerOpen::new(Default::default())),
        }
    }
}
