//! [`CircuitBreaker`]: the `Service` that admits each call through its
//! breaker and records the call's outcome at the end of its body.

use std::task::{ready, Context, Poll};

use tokio::time::Instant;
use tower_service::Service;

use super::admission::Reservation;
use super::admission::WhenOpen;
use super::body::Record;
use super::future::ResponseFuture;
use super::shared::handle::Breaker;
use crate::classify::completion::TrackCompletion;
use crate::classify::timing::StopPoint;
use crate::classify::{AtEndOfBody, AtResponse, Classify};
use crate::error::{BoxError, BreakerOpen};

/// A service behind a circuit breaker; see the [module docs](super).
///
/// `K` is when it records a call's outcome: at the end of the response's
/// body ([`AtEndOfBody`], the default, for an `http::Response<B>` with
/// `B: http_body::Body`) or when the response arrives ([`AtResponse`], for
/// any response: [`CircuitBreaker::at_response`]).
///
/// # Requirements
///
/// | | `AtEndOfBody` (default) | `AtResponse` |
/// |---|---|---|
/// | request | any | any |
/// | response | `http::Response<B>`, `B: http_body::Body` | any `T` |
/// | error | `Into<BoxError>` | `Into<BoxError>` |
/// | classifier `C` | `Classify<http::Response<B>, S::Error> + Clone` | `Classify<T, S::Error> + Clone` |
/// | returns | `http::Response<ResponseBody<B, C::Eos>>` | `T`, unchanged |
///
/// `call` without a `poll_ready` that returned `Ready` fails with
/// [`NotReady`](crate::error::NotReady): the inner service is not called,
/// no permit is taken, nothing is recorded (the crate's
/// [readiness contract](crate#readiness)).
#[derive(Debug)]
pub struct CircuitBreaker<S, C, K = AtEndOfBody> {
    inner: S,
    breaker: Breaker,
    classifier: C,
    when_open: WhenOpen,
    /// Fail-fast: whether (and how) `poll_ready` returned ready.
    ready: Ready,
    /// Backpressure: the permit `poll_ready` reserved, and its timer.
    reservation: Reservation,
    stop: StopPoint,
    track: K,
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
    /// Wraps `inner` with `breaker`, classifying outcomes with
    /// `classifier`; fails fast ([`WhenOpen::FailFast`]).
    pub fn new(inner: S, breaker: Breaker, classifier: C) -> Self {
        Self {
            inner,
            breaker,
            classifier,
            when_open: WhenOpen::FailFast,
            ready: Ready::No,
            reservation: Reservation::default(),
            stop: StopPoint::FirstFrame,
            track: AtEndOfBody,
        }
    }
}

impl<S, C, K> CircuitBreaker<S, C, K> {
    /// Records each call's outcome when its response arrives, for a
    /// response of any type (see [`AtResponse`]).
    pub fn at_response(self) -> CircuitBreaker<S, C, AtResponse> {
        self.with_track(AtResponse::default())
    }

    /// The same breaker, recording at `track`.
    pub(super) fn with_track<K2>(self, track: K2) -> CircuitBreaker<S, C, K2> {
        CircuitBreaker {
            inner: self.inner,
            breaker: self.breaker,
            classifier: self.classifier,
            when_open: self.when_open,
            ready: self.ready,
            reservation: self.reservation,
            stop: self.stop,
            track,
        }
    }

    /// Sets how callers are treated while the breaker does not admit
    /// (default [`WhenOpen::FailFast`]); see the
    /// [module docs](super#when-open-fail-fast-or-backpressure). Forgets
    /// any readiness or reservation already obtained.
    pub fn with_when_open(self, when_open: WhenOpen) -> Self {
        Self {
            when_open,
            ready: Ready::No,
            reservation: Reservation::default(),
            ..self
        }
    }

    /// How callers are treated while the breaker does not admit.
    pub fn when_open(&self) -> WhenOpen {
        self.when_open
    }

    /// Stops the slow-call clock at `stop` (default
    /// [`StopPoint::FirstFrame`]).
    pub(crate) fn with_stop_point(mut self, stop: StopPoint) -> Self {
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

impl<S: Clone, C: Clone, K: Clone> Clone for CircuitBreaker<S, C, K> {
    /// Shares the breaker and the admission mode; the clone has not been
    /// polled ready and holds no reservation.
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            breaker: self.breaker.clone(),
            classifier: self.classifier.clone(),
            when_open: self.when_open,
            ready: Ready::No,
            reservation: Reservation::default(),
            stop: self.stop,
            track: self.track.clone(),
        }
    }
}

impl<S, C, K, Req> Service<Req> for CircuitBreaker<S, C, K>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    C: Classify<S::Response, S::Error> + Clone,
    K: TrackCompletion<S::Response, C::Eos, Record> + Clone,
{
    type Response = K::Output;
    type Error = BoxError;
    type Future = ResponseFuture<S::Future, C, K>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if self.when_open == WhenOpen::Backpressure {
            return self.poll_reserve(cx);
        }
        if self.ready != Ready::No {
            return Poll::Ready(Ok(()));
        }
        // The clock is read only when the breaker does not admit freely.
        if !self.breaker.admits_with(Instant::now) {
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
        if self.when_open == WhenOpen::Backpressure {
            // Reserved in `poll_ready` only after the inner service was
            // driven ready; a stale reservation fails fast.
            if !self.reservation.is_reserved() {
                return ResponseFuture::not_ready(self.track.clone());
            }
            return match self.reservation.take(&self.breaker, Instant::now()) {
                Ok(permit) => {
                    let classifier = self.classifier.clone();
                    let track = self.track.clone();
                    ResponseFuture::new(self.inner.call(req), permit, classifier, self.stop, track)
                }
                Err(open) => ResponseFuture::failed(open, self.track.clone()),
            };
        }
        let ready = std::mem::replace(&mut self.ready, Ready::No);
        if ready == Ready::No {
            // Called without `poll_ready`: never call an unready service.
            return ResponseFuture::not_ready(self.track.clone());
        }
        match (ready, self.breaker.try_acquire()) {
            (Ready::Inner, Ok(permit)) => {
                let classifier = self.classifier.clone();
                let track = self.track.clone();
                ResponseFuture::new(self.inner.call(req), permit, classifier, self.stop, track)
            }
            (_, Err(open)) => ResponseFuture::failed(open, self.track.clone()),
            // Admitted, but the inner service was not driven to ready (the
            // breaker left Open between `poll_ready` and `call`): never call
            // an unready service; the permit goes back uncounted.
            (_, Ok(_permit)) => {
                ResponseFuture::failed(BreakerOpen::new(Default::default()), self.track.clone())
            }
        }
    }
}

impl<S, C, K> CircuitBreaker<S, C, K> {
    /// Backpressure's `poll_ready`: the inner service driven ready, then a
    /// permit reserved, else `Pending` until the breaker may admit.
    fn poll_reserve<Req>(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>>
    where
        S: Service<Req>,
        S::Error: Into<BoxError>,
    {
        if self.reservation.is_reserved() {
            // Ready stays ready until `call`, even if the breaker has moved
            // on since: `call` then fails fast.
            return Poll::Ready(Ok(()));
        }
        ready!(self.inner.poll_ready(cx)).map_err(Into::into)?;
        ready!(self.reservation.poll_reserve(&self.breaker, cx));
        Poll::Ready(Ok(()))
    }
}
