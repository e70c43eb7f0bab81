//! [`FirstFrame`]: an event stream's answer is ready at its first chunk,
//! not at its head (the layer's docs say why and how).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::classify::sse::{is_event_stream, SseScan};
use crate::error::{BoxError, StreamFailed, StreamFailure};

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
/// response future resolves at its **first chunk** — the first frame that
/// ends a `data:` line (not `[DONE]`, not an error), the time to first
/// token for the hedge's delay; comments (`: keep-alive`), empty frames and
/// a chunk's line split over frames are held back until then (at most 64
/// frames or 64 KiB: past that the stream is answered as it is). A body
/// that fails, ends without a chunk, or carries an error event before it
/// is [`StreamFailed`], which a [`RetryPolicy`](super::RetryPolicy)
/// retries on another backend. Once the chunk is passed on nothing is
/// retried or hedged: the caller has part of one backend's answer, which
/// another backend's tokens would not continue.
///
/// There is no timeout here: a stream that sends its head and never a
/// chunk keeps the future pending, as a server that never answers would;
/// put a `tower::timeout::Timeout` above (or the hedge, whose backup comes
/// at its delay). Over a [`ModelBalancer`](crate::balance::ModelBalancer)
/// the response is `http::Response<Replay<balance::ResponseBody<B>>>`.
///
/// ```
/// use bytes::Bytes;
/// use http_body_util::{BodyExt, StreamBody};
/// use tower::{service_fn, Layer, ServiceExt};
/// use tower_model_balance::error::{StreamFailed, StreamFailure};
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
/// assert_eq!(err.downcast_ref::<StreamFailed>().unwrap().reason, StreamFailure::Cut);
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

/// Resolves an event stream's response at its first chunk, or fails it
/// with [`StreamFailed`] if the body fails, ends or carries an error event
/// first (see [`FirstFrameLayer`]). Any other response (not
/// `text/event-stream`) passes at once. The body comes back whole: the
/// frames read first, then the rest as the inner body yields it.
///
/// # Requirements
///
/// | | |
/// |---|---|
/// | inner service `S` | `Service<Req, Response = http::Response<B>>`, `B: http_body::Body + Unpin` (hyper's `Incoming` and the balancer's `ResponseBody` over it are; box another) |
/// | errors | `S::Error` and `B::Error`: `Into<BoxError>`; returns `BoxError` |
/// | returns | `http::Response<Replay<B>>` |
///
/// `poll_ready` is the inner service's and `call` forwards: it keeps no
/// readiness of its own, and the inner service's contract applies (the
/// crate's [readiness contract](crate#readiness)).
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

/// The most frames, and bytes, held back before a stream's first chunk
/// (comments, keep-alives, a chunk's line split over frames): past them
/// the stream is answered as it is, so a server that never sends a chunk
/// cannot make the adapter hold its body.
const HOLD_FRAMES: usize = 64;
const HOLD_BYTES: usize = 64 << 10;

pin_project! {
    #[project = StateProj]
    enum State<F, B: Body> {
        Head { #[pin] future: F },
        // The head of an event stream, its body polled to its first chunk.
        Body { parts: Option<http::response::Parts>, body: Option<B>, held: Held<B::Data>, scan: SseScan },
        Done,
    }
}

/// The frames read before a stream's first chunk, and the chunk's: the
/// first in place (no allocation for a stream whose first frame is its
/// first chunk), the rest in a queue.
#[derive(Debug)]
struct Held<D> {
    first: Option<Frame<D>>,
    more: VecDeque<Frame<D>>,
    bytes: usize,
}

impl<D: bytes::Buf> Held<D> {
    fn new() -> Self {
        Self {
            first: None,
            more: VecDeque::new(),
            bytes: 0,
        }
    }

    fn push(&mut self, frame: Frame<D>) {
        self.bytes += frame.data_ref().map_or(0, bytes::Buf::remaining);
        match self.first {
            None => self.first = Some(frame),
            Some(_) => self.more.push_back(frame),
        }
    }

    fn pop(&mut self) -> Option<Frame<D>> {
        let frame = self.first.take().or_else(|| self.more.pop_front())?;
        self.bytes -= frame.data_ref().map_or(0, bytes::Buf::remaining);
        Some(frame)
    }

    fn is_empty(&self) -> bool {
        self.first.is_none() && self.more.is_empty()
    }

    fn is_full(&self) -> bool {
        1 + self.more.len() >= HOLD_FRAMES || self.bytes >= HOLD_BYTES
    }
}

pin_project! {
    /// The response future of [`FirstFrame`].
    pub struct FirstFrameFuture<F, B: Body> {
        #[pin]
        state: State<F, B>,
    }
}

impl<F, B: Body> std::fmt::Debug for FirstFrameFuture<F, B> {
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
                        held: Held::new(),
                        scan: SseScan::new(),
                    });
                }
                StateProj::Body {
                    parts,
                    body,
                    held,
                    scan,
                } => {
                    let Some(inner) = body.as_mut() else {
                        return Poll::Ready(Err("first frame: polled after completion".into()));
                    };
                    let frame = ready!(Pin::new(inner).poll_frame(cx));
                    let (answer, ended) = match frame {
                        Some(Ok(frame)) => {
                            if let Some(data) = frame.data_ref() {
                                scan.frame(data);
                            }
                            let trailers = frame.is_trailers();
                            held.push(frame);
                            match scan.errored() {
                                true => (Err((StreamFailure::ErrorEvent, None)), false),
                                // The first chunk (or trailers, or the
                                // hold full): the answer.
                                false if scan.events() > 0 || trailers || held.is_full() => {
                                    (Ok(()), false)
                                }
                                false => continue,
                            }
                        }
                        Some(Err(error)) => (Err((StreamFailure::Cut, Some(error.into()))), true),
                        // Ended whole without a chunk (`[DONE]` alone): the
                        // answer as it is; else a failure.
                        None if scan.is_done() => (Ok(()), true),
                        None => (Err((StreamFailure::Ended, None)), true),
                    };
                    if let Err((reason, source)) = answer {
                        // The body goes now: the backend's outcome (a
                        // failure) is recorded before a retry is sent.
                        this.state.set(State::Done);
                        return Poll::Ready(Err(StreamFailed::new(reason, source).into()));
                    }
                    let (Some(parts), Some(inner)) = (parts.take(), body.take()) else {
                        return Poll::Ready(Err("first frame: polled after completion".into()));
                    };
                    let held = std::mem::replace(held, Held::new());
                    this.state.set(State::Done);
                    let replay = Replay { held, ended, inner };
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
    /// The body [`FirstFrame`] returns: the frames it read up to the
    /// stream's first chunk, then the rest of the inner body, unchanged
    /// (its errors not boxed).
    #[derive(Debug)]
    pub struct Replay<B: Body> {
        held: Held<B::Data>,
        // The inner body already ended: it is not polled again.
        ended: bool,
        #[pin]
        inner: B,
    }
}

impl<B: Body> Replay<B> {
    fn new(inner: B) -> Self {
        Self {
            held: Held::new(),
            ended: false,
            inner,
        }
    }

    /// The inner body (the frames read first are not in it).
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
        if let Some(frame) = this.held.pop() {
            return Poll::Ready(Some(Ok(frame)));
        }
        if *this.ended {
            return Poll::Ready(None);
        }
        this.inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_empty() && (self.ended || self.inner.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let n = self.held.bytes as u64;
        if self.ended {
            return SizeHint::with_exact(n);
        }
        let mut hint = self.inner.size_hint();
        hint.set_lower(hint.lower().saturating_add(n));
        if let Some(upper) = hint.upper() {
            hint.set_upper(upper.saturating_add(n));
        }
        hint
    }
}
