//! [`FirstFrame`]: an event stream's answer is ready at its first frame,
//! not at its head.
//!
//! OpenAI-compatible servers send `200` and `text/event-stream` as soon as
//! a streamed request is accepted, then the tokens. To a layer above, the
//! head says nothing yet: the hedge would take it as the answer (and never
//! send its backup, however slow the first token), its latency window
//! would hold the time to the head, and a retry could not fail over a
//! stream cut before its first token. Below this adapter, an event
//! stream's response future resolves at its body's first frame: the time
//! to first token, for the hedge's delay; a body that fails, ends, or
//! begins with an error event before it is [`StreamFailed`], which a
//! [`RetryPolicy`](super::RetryPolicy) retries on another backend.
//! Once that frame is passed on, nothing is retried or hedged: the caller
//! has part of one backend's answer, which another backend's tokens
//! would not continue.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::classify::sse::{is_event_stream, SseScan};
use crate::error::{BoxError, StreamFailed};

/// Adds [`FirstFrame`] to a service: put it between a
/// [`HedgeLayer`](super::HedgeLayer) (or a `tower::retry::RetryLayer` with
/// a [`RetryPolicy`](super::RetryPolicy)) and the balancer.
///
/// OpenAI-compatible servers send `200` and `text/event-stream` as soon as
/// a streamed request is accepted, then the tokens. To a layer above, the
/// head says nothing yet: the hedge would take it as the answer (and never
/// send its backup, however slow the first token), its latency window
/// would hold the time to the head, and a retry could not fail over a
/// stream cut before its first token. Below this layer an event stream's
/// response future resolves at its body's first frame — the time to first
/// token, for the hedge's delay — and a body that fails, ends, or begins
/// with an error event before it is [`StreamFailed`], which a
/// [`RetryPolicy`](super::RetryPolicy) retries on another backend. Once
/// that frame is passed on nothing is retried or hedged: the caller has
/// part of one backend's answer, which another backend's tokens would not
/// continue.
///
/// ```
/// use bytes::Bytes;
/// use http_body_util::{BodyExt, StreamBody};
/// use tower::{service_fn, Layer, ServiceExt};
/// use tower_model_balance::error::StreamFailed;
/// use tower_model_balance::hedge::FirstFrameLayer;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// // A server whose stream is cut before its first token.
/// let server = service_fn(|_req: http::Request<()>| async {
///     let cut = futures_util::stream::iter([Err::<http_body::Frame<Bytes>, _>(
///         std::io::Error::from(std::io::ErrorKind::ConnectionReset),
///     )]);
///     let response = http::Response::builder()
///         .header("content-type", "text/event-stream")
///         .body(StreamBody::new(cut))
///         .unwrap();
///     Ok::<_, std::io::Error>(response)
/// });
/// let err = FirstFrameLayer::new().layer(server).oneshot(http::Request::new(())).await.unwrap_err();
/// assert_eq!(err.downcast_ref::<StreamFailed>().unwrap().reason, "body error");
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct FirstFrameLayer {
    _priv: (),
}

impl FirstFrameLayer {
    /// The layer.
    pub fn new() -> Self {
        Self::default()
    }
}

impl<S> Layer<S> for FirstFrameLayer {
    type Service = FirstFrame<S>;

    fn layer(&self, inner: S) -> FirstFrame<S> {
        FirstFrame { inner }
    }
}

/// Resolves an event stream's response at its body's first frame, or
/// fails it with [`StreamFailed`] if the body fails, ends or begins with
/// an error event first (see [`FirstFrameLayer`]). Any other response
/// (not `text/event-stream`) passes at once. The body comes back whole:
/// the first frame, then the rest as the inner body yields it.
///
/// # Requirements
///
/// | | |
/// |---|---|
/// | inner service `S` | `Service<Req, Response = http::Response<B>>`, `B: http_body::Body + Unpin` (hyper's `Incoming` and the balancer's `ResponseBody` over it are; box another) |
/// | errors | `S::Error` and `B::Error`: `Into<BoxError>`; returns `BoxError` |
/// | returns | `http::Response<Replay<B>>` |
#[derive(Debug, Clone)]
pub struct FirstFrame<S> {
    inner: S,
}

impl<S, Req, B> Service<Req> for FirstFrame<S>
where
    S: Service<Req, Response = http::Response<B>>,
    S::Error: Into<BoxError>,
    B: Body + Unpin,
    B::Error: Into<BoxError>,
{
    type Response = http::Response<Replay<B>>;
    type Error = BoxError;
    type Future = FirstFrameFuture<S::Future, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        FirstFrameFuture {
            state: State::Head {
                future: self.inner.call(req),
            },
        }
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, B> {
        Head { #[pin] future: F },
        // The head of an event stream, its body polled to its first frame.
        Body { parts: Option<http::response::Parts>, body: Option<B>, scan: SseScan },
        Done,
    }
}

pin_project! {
    /// The response future of [`FirstFrame`].
    pub struct FirstFrameFuture<F, B> {
        #[pin]
        state: State<F, B>,
    }
}

impl<F, B> std::fmt::Debug for FirstFrameFuture<F, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FirstFrameFuture").finish_non_exhaustive()
    }
}

impl<F, E, B> Future for FirstFrameFuture<F, B>
where
    F: Future<Output = Result<http::Response<B>, E>>,
    E: Into<BoxError>,
    B: Body + Unpin,
    B::Error: Into<BoxError>,
{
    type Output = Result<http::Response<Replay<B>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Head { future } => {
                    let response = ready!(future.poll(cx)).map_err(Into::into)?;
                    if !is_event_stream(response.headers()) {
                        this.state.set(State::Done);
                        return Poll::Ready(Ok(response.map(Replay::new)));
                    }
                    let (parts, body) = response.into_parts();
                    this.state.set(State::Body {
                        parts: Some(parts),
                        body: Some(body),
                        scan: SseScan::new(),
                    });
                }
                StateProj::Body { parts, body, scan } => {
                    let Some(inner) = body.as_mut() else {
                        return Poll::Ready(Err("first frame: polled after completion".into()));
                    };
                    let frame = ready!(Pin::new(inner).poll_frame(cx));
                    let failure = match &frame {
                        Some(Ok(first)) => first.data_ref().and_then(|data| {
                            scan.frame(data);
                            scan.errored().then_some("error event")
                        }),
                        Some(Err(_)) => Some("body error"),
                        None => Some("ended before its first frame"),
                    };
                    if let Some(reason) = failure {
                        let source = match frame {
                            Some(Err(error)) => Some(error.into()),
                            _ => None,
                        };
                        // The body goes now: the backend's outcome (a
                        // failure) is recorded before a retry is sent.
                        this.state.set(State::Done);
                        return Poll::Ready(Err(StreamFailed::new(reason, source).into()));
                    }
                    let Some(Ok(first)) = frame else {
                        return Poll::Ready(Err("first frame: polled after completion".into()));
                    };
                    let (Some(parts), Some(body)) = (parts.take(), body.take()) else {
                        return Poll::Ready(Err("first frame: polled after completion".into()));
                    };
                    this.state.set(State::Done);
                    let replay = Replay {
                        first: Some(first),
                        inner: body,
                    };
                    return Poll::Ready(Ok(http::Response::from_parts(parts, replay)));
                }
                StateProj::Done => {
                    return Poll::Ready(Err("first frame: polled after completion".into()));
                }
            }
        }
    }
}

pin_project! {
    /// The body [`FirstFrame`] returns: the frame it read first, then the
    /// rest of the inner body, unchanged (its errors not boxed).
    #[derive(Debug)]
    pub struct Replay<B: Body> {
        first: Option<Frame<B::Data>>,
        #[pin]
        inner: B,
    }
}

impl<B: Body> Replay<B> {
    fn new(inner: B) -> Self {
        Self { first: None, inner }
    }

    /// The inner body (the first frame, if read, is not in it).
    pub fn get_ref(&self) -> &B {
        &self.inner
    }
}

impl<B: Body> Body for Replay<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        if let Some(first) = this.first.take() {
            return Poll::Ready(Some(Ok(first)));
        }
        this.inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let mut hint = self.inner.size_hint();
        if let Some(data) = self.first.as_ref().and_then(Frame::data_ref) {
            let n = bytes::Buf::remaining(data) as u64;
            hint.set_lower(hint.lower().saturating_add(n));
            if let Some(upper) = hint.upper() {
                hint.set_upper(upper.saturating_add(n));
            }
        }
        hint
    }
}
