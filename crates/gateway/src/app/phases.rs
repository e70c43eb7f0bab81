//! Timeouts per phase of a backend's answer. Those where the backend is
//! at fault sit inside the balancer, so that its breaker and health count
//! them: connecting (the client's, [`Timeouts::connect`]), an event
//! stream's first token ([`Phases`]), and the gap between two frames of a
//! body ([`IdleBody`]: a server that stalls mid-stream). The request's
//! total ([`Timeouts::request`]) is the gateway's own, above the stack
//! (`routes`): a client that asks for a long generation cannot open a
//! breaker or lower a health score, and a non-streamed answer, whose head
//! comes only with its last token, has no other timeout — but a backend
//! whose health probes go unanswered has its waiting requests cut
//! (`unresponsive.rs`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};
use tower_model_balance::backend::BackendId;
use tower_model_balance::error::BoxError;

use super::access_log::Attempts;
use super::unresponsive::{BackendUnresponsive, Cuts, Watched};

/// The gateway's timeouts, one per phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Timeouts {
    /// The most a backend may take to accept a connection (default 5 s;
    /// counted against it).
    pub connect: Duration,
    /// The most an event stream (`"stream": true`) may take to its first
    /// token, from the request's start (default 60 s; counted against the
    /// backend).
    pub first_token: Duration,
    /// The most a backend may go between two frames of a body, the first
    /// of a non-streamed answer's after its head among them (default 60
    /// s; counted against it: the stream stalled).
    pub idle: Duration,
    /// The most a request may take in all, its answer's last byte
    /// included (default 30 min: 50,000 tokens at 30 a second; not
    /// counted against the backend). The only timeout on a non-streamed
    /// answer's head, which comes with its last token.
    pub request: Duration,
    /// How long a backend's health probes may go unanswered (three in a
    /// row at least) while a peer's are answered before its requests
    /// waiting for a response head are cut (default 10 s; zero: never;
    /// counted against the backend; `unresponsive.rs`).
    pub unresponsive: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(5),
            first_token: Duration::from_secs(60),
            idle: Duration::from_secs(60),
            request: Duration::from_secs(30 * 60),
            unresponsive: Duration::from_secs(10),
        }
    }
}

/// Marks a request whose answer is an event stream (the body's `stream`
/// is `true`): its first token has [`Timeouts::first_token`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Streamed;

/// The phase a backend overran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Phase {
    /// No first token of an event stream in time.
    FirstToken,
    /// No frame in time after the one before (or after the head).
    Idle,
}

/// A backend overran a phase's timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PhaseElapsed {
    /// Which phase.
    pub phase: Phase,
    /// Its timeout.
    pub after: Duration,
    /// The backend, when known (before the answer's head: the receipt
    /// names it after), for the access log; never in the answer.
    pub backend: Option<BackendId>,
}

impl std::fmt::Display for PhaseElapsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secs = self.after.as_secs_f64();
        match self.phase {
            Phase::FirstToken => write!(f, "the backend sent no first token within {secs} s"),
            Phase::Idle => write!(f, "the backend's answer stalled: nothing for {secs} s"),
        }
    }
}

impl std::error::Error for PhaseElapsed {}

/// A backend's endpoint under the phase timeouts: an event stream's head
/// and first token within `first_token` of the request's start, every
/// frame after within `idle` of the one before; and a request still
/// waiting for its head when the backend is found unresponsive
/// (`unresponsive.rs`) cut.
#[derive(Debug, Clone)]
pub struct Phases<S> {
    inner: S,
    first_token: Duration,
    idle: Duration,
    cuts: Cuts,
}

impl<S> Phases<S> {
    /// `inner` under `timeouts`' first-token and idle timeouts, its
    /// waiting requests cut at each of `cuts`.
    pub fn new(inner: S, timeouts: &Timeouts, cuts: Cuts) -> Self {
        Self {
            inner,
            first_token: timeouts.first_token,
            idle: timeouts.idle,
            cuts,
        }
    }
}

/// Resolves at the next cut after the request was sent.
type Cut = Pin<Box<dyn Future<Output = ()> + Send>>;

impl<S, Q, B> tower::Service<http::Request<Q>> for Phases<S>
where
    S: tower::Service<http::Request<Q>, Response = http::Response<B>>,
    S::Error: Into<BoxError>,
{
    type Response = http::Response<IdleBody<B>>;
    type Error = BoxError;
    type Future = PhasesFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<Q>) -> Self::Future {
        if let Some(attempts) = req.extensions().get::<Attempts>() {
            attempts.note();
        }
        let first_token = req
            .extensions()
            .get::<Streamed>()
            .map(|_| Instant::now() + self.first_token);
        PhasesFuture {
            inner: self.inner.call(req),
            first_token: first_token.map(|at| (at, Box::pin(tokio::time::sleep_until(at)))),
            after: self.first_token,
            idle: self.idle,
            cut: self.cuts.next(),
            watched: self.cuts.watched(),
        }
    }
}

pin_project! {
    /// [`Phases`]' response future.
    pub struct PhasesFuture<F> {
        #[pin]
        inner: F,
        first_token: Option<(Instant, Pin<Box<Sleep>>)>,
        after: Duration,
        idle: Duration,
        cut: Cut,
        watched: Arc<Watched>,
    }
}

impl<F> std::fmt::Debug for PhasesFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PhasesFuture")
            .field("first_token", &self.first_token.as_ref().map(|(at, _)| at))
            .field("idle", &self.idle)
            .finish_non_exhaustive()
    }
}

impl<F, B, E> Future for PhasesFuture<F>
where
    F: Future<Output = Result<http::Response<B>, E>>,
    E: Into<BoxError>,
{
    type Output = Result<http::Response<IdleBody<B>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(result) = this.inner.poll(cx) {
            let response = result.map_err(Into::into)?;
            // A response head: the backend is reached (readiness).
            this.watched.reached().note();
            let (deadline, phase, after) = match this.first_token.take() {
                Some((at, _)) => (at, Phase::FirstToken, *this.after),
                None => (Instant::now() + *this.idle, Phase::Idle, *this.idle),
            };
            let idle = *this.idle;
            return Poll::Ready(Ok(response.map(|body| IdleBody {
                inner: body,
                sleep: Box::pin(tokio::time::sleep_until(deadline)),
                phase,
                after,
                idle,
                done: false,
            })));
        }
        if this.cut.as_mut().poll(cx).is_ready() {
            let cut = BackendUnresponsive::new().on(this.watched.backend());
            return Poll::Ready(Err(cut.into()));
        }
        if let Some((_, sleep)) = this.first_token {
            ready!(sleep.as_mut().poll(cx));
            let elapsed = PhaseElapsed {
                phase: Phase::FirstToken,
                after: *this.after,
                backend: this.watched.backend(),
            };
            return Poll::Ready(Err(elapsed.into()));
        }
        Poll::Pending
    }
}

/// A backend's body with a bound on the wait for each frame: the first
/// (an event stream's first token) by its deadline, each after within the
/// idle timeout of the one before. Past it the body fails with
/// [`PhaseElapsed`], which the balancer counts against the backend.
#[derive(Debug)]
pub struct IdleBody<B> {
    inner: B,
    sleep: Pin<Box<Sleep>>,
    phase: Phase,
    after: Duration,
    idle: Duration,
    done: bool,
}

impl<B> Body for IdleBody<B>
where
    B: Body + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, BoxError>>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.phase = Phase::Idle;
                this.after = this.idle;
                this.sleep.as_mut().reset(Instant::now() + this.idle);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(error))) => {
                this.done = true;
                Poll::Ready(Some(Err(error.into())))
            }
            Poll::Ready(None) => {
                this.done = true;
                Poll::Ready(None)
            }
            Poll::Pending => {
                ready!(this.sleep.as_mut().poll(cx));
                this.done = true;
                let elapsed = PhaseElapsed {
                    phase: this.phase,
                    after: this.after,
                    backend: None,
                };
                Poll::Ready(Some(Err(elapsed.into())))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::unresponsive::Unresponsive;
    use tower::{Service, ServiceExt};
    use tower_model_balance::endpoint::Origin;

    #[tokio::test]
    async fn each_attempt_through_an_endpoint_is_counted_on_the_requests_copies() {
        let inner = tower::service_fn(|_: http::Request<()>| async {
            Ok::<_, BoxError>(http::Response::new(
                http_body_util::Empty::<bytes::Bytes>::new(),
            ))
        });
        let origin = Origin::http(([127, 0, 0, 1], 1).into());
        let cuts = Unresponsive::new(Duration::from_secs(10)).watch(&origin);
        let mut endpoint = Phases::new(inner, &Timeouts::default(), cuts);
        let attempts = Attempts::default();
        let mut first = http::Request::new(());
        first.extensions_mut().insert(attempts.clone());
        // A hedge's backup or a retry: a copy of the request.
        let again = first.clone();
        for req in [first, again] {
            endpoint.ready().await.unwrap().call(req).await.unwrap();
        }
        assert_eq!(attempts.count(), 2);
    }
}
