//! [`BufferRequestBody`]: a request body read whole, under a limit, into a
//! body the hedge can copy — for tonic's `Body` and other streaming
//! bodies, which are not `Clone`.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::Request;
use http_body::Body;
use http_body_util::Full;
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::buffer::{ReadWhole, Unread};
use crate::error::BoxError;

/// Wraps a service in [`BufferRequestBody`], which reads each request's
/// body whole, up to a limit, into an `http_body_util::Full<Bytes>` the
/// [`Hedge`](super::Hedge) can copy.
///
/// ```
/// use std::time::Duration;
///
/// use bytes::Bytes;
/// use http_body_util::Full;
/// use tower::{service_fn, ServiceBuilder, ServiceExt};
/// use tower_model_balance::error::{BoxError, PayloadTooLarge};
/// use tower_model_balance::hedge::{BufferRequestBodyLayer, HedgeConfig, HedgeLayer};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), BoxError> {
/// // Where a tonic `Channel` (or a balancer over channels) would be: it
/// // takes tonic's body, which is not `Clone`.
/// let channel = service_fn(|req: http::Request<tonic::body::Body>| async move {
///     let bytes = http_body_util::BodyExt::collect(req.into_body()).await?.to_bytes();
///     Ok::<_, BoxError>(http::Response::new(bytes.len()))
/// });
/// let policy = HedgeConfig::builder().ceiling(Duration::from_secs(1)).build()?;
/// let client = ServiceBuilder::new()
///     // tonic's body in, read whole (at most 4 MiB, gRPC's default
///     // message size), `Full<Bytes>` out: the hedge can copy it.
///     .layer(BufferRequestBodyLayer::new(4 << 20))
///     .layer(HedgeLayer::new(policy))
///     // Back to tonic's body under the hedge, for the channel.
///     .map_request(|req: http::Request<Full<Bytes>>| req.map(tonic::body::Body::new))
///     .service(channel);
///
/// let request = http::Request::post("/inference.GRPCInferenceService/ModelInfer")
///     .header("x-model-id", "resnet-50")
///     .body(tonic::body::Body::new(Full::new(Bytes::from_static(b"a message"))))?;
/// assert_eq!(*client.clone().oneshot(request).await?.body(), 9);
///
/// // A body over the limit is refused before the request is sent.
/// let big = tonic::body::Body::new(Full::new(Bytes::from(vec![0; 5 << 20])));
/// let err = client.oneshot(http::Request::new(big)).await.unwrap_err();
/// assert_eq!(err.downcast_ref::<PayloadTooLarge>(), Some(&PayloadTooLarge::new(4 << 20)));
/// # Ok(()) }
/// ```
///
/// The hedge sends a request twice, so it needs a request it can copy
/// ([`CloneRequest`](super::CloneRequest)): `http::Request<B>` with a
/// `Clone` body. A streaming body — tonic's `tonic::body::Body`, hyper's
/// `Incoming`, a `StreamBody` — is read once and gone, and the orphan rule
/// keeps a user from implementing `CloneRequest` for
/// `http::Request<tonic::body::Body>`. This layer reads the body first, up
/// to a limit, and hands the request on with the bytes in a
/// `Full<Bytes>`, whose clone shares them. The stack:
///
/// ```text
/// caller ─► BufferRequestBody ─► Hedge ─► [map_request: Full → the inner body] ─► balancer ─► endpoint
/// ```
///
/// Put it only where a hedge (or a retry) needs it: a buffered body no
/// longer streams, and its bytes are held until the request ends. A gRPC
/// unary call's message is one frame anyway. A client-streaming or
/// bidirectional call must not go through it: its body may end only after
/// the answer has begun, which a buffered call never sees.
/// Over HTTP, `route::ModelFromBodyLayer` (feature `body`) buffers the body
/// as well, while it reads the model: with it above, this layer is not
/// needed.
#[derive(Debug, Clone, Copy)]
pub struct BufferRequestBodyLayer {
    limit: usize,
}

impl BufferRequestBodyLayer {
    /// A layer that reads each request body whole, at most `limit_bytes`
    /// bytes. There is no default: for gRPC, 4 MiB (`4 << 20`) is the
    /// largest message a gRPC server (tonic, grpc-go, grpc-java) takes by
    /// default.
    pub const fn new(limit_bytes: usize) -> Self {
        Self { limit: limit_bytes }
    }
}

impl<S> Layer<S> for BufferRequestBodyLayer {
    type Service = BufferRequestBody<S>;

    fn layer(&self, inner: S) -> Self::Service {
        BufferRequestBody::new(inner, self.limit)
    }
}

/// Reads a request's body whole, at most a limit in bytes, and calls the
/// inner service with the bytes as an `http_body_util::Full<Bytes>`, a
/// body the [`Hedge`](super::Hedge) above the inner service can copy. Made
/// by [`BufferRequestBodyLayer`], whose docs say where it goes and why.
///
/// The request's head (method, URI, headers, extensions such as a
/// [`RouteInfo`](crate::route::RouteInfo)) goes on unchanged. The body's
/// trailers, if it has any, are dropped: `Full` carries none (a gRPC
/// unary request has none; a debug event counts any dropped).
///
/// # Errors
///
/// The error type is [`BoxError`], holding:
///
/// * [`PayloadTooLarge`](crate::error::PayloadTooLarge) with the limit,
///   when the body is longer than the limit (found at the frame that
///   crosses it; a size hint is not trusted either way); the inner
///   service is not called, and the body is never truncated;
/// * the body's own error, boxed, when reading it fails (the client broke
///   it off); the inner service is not called;
/// * the inner service's error, boxed.
///
/// # Requirements
///
/// | | |
/// |---|---|
/// | request | `http::Request<B>`, `B: http_body::Body`, `B::Error: Into<BoxError>` (tonic's `Body`, hyper's `Incoming`, any) |
/// | inner service `S` | `Service<http::Request<Full<Bytes>>> + Clone` |
/// | error | `S::Error: Into<BoxError>` |
/// | hands on | `http::Request<Full<Bytes>>` |
///
/// # Backpressure
///
/// `poll_ready` is the inner service's: the layer adds no backpressure and
/// sheds nothing. As tower's middleware with a step before the call does,
/// `call` takes the inner service that was made ready into the response
/// future, which calls it once the body is read, and leaves a clone in its
/// place for the next `poll_ready`. It keeps no readiness of its own: a
/// `call` without `poll_ready` is forwarded, and the inner service's
/// contract applies (the crate's [readiness contract](crate#readiness)).
#[derive(Debug, Clone)]
pub struct BufferRequestBody<S> {
    inner: S,
    limit: usize,
}

impl<S> BufferRequestBody<S> {
    /// Wraps `inner`, reading each request body whole, at most
    /// `limit_bytes` bytes.
    pub const fn new(inner: S, limit_bytes: usize) -> Self {
        Self {
            inner,
            limit: limit_bytes,
        }
    }

    /// The most body bytes read, in bytes.
    pub const fn limit(&self) -> usize {
        self.limit
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, B> Service<Request<B>> for BufferRequestBody<S>
where
    S: Service<Request<Full<Bytes>>> + Clone,
    S::Error: Into<BoxError>,
    B: Body,
    B::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BufferRequestBodyFuture<B, S>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        // The service made ready goes with the request; its clone waits
        // for the next `poll_ready`.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        let (parts, body) = req.into_parts();
        BufferRequestBodyFuture {
            state: State::Reading {
                body: ReadWhole::new(body, self.limit),
                call: Some((parts, inner)),
            },
        }
    }
}

pin_project! {
    #[project = StateProj]
    enum State<B: Body, S, F> {
        // The body being read; the head and the ready service kept for the
        // call.
        Reading { #[pin] body: ReadWhole<B>, call: Option<(http::request::Parts, S)> },
        Calling { #[pin] future: F },
        Done,
    }
}

pin_project! {
    /// The response future of [`BufferRequestBody`]: reads the body, then
    /// calls the inner service.
    pub struct BufferRequestBodyFuture<B: Body, S: Service<Request<Full<Bytes>>>> {
        #[pin]
        state: State<B, S, S::Future>,
    }
}

impl<B: Body, S: Service<Request<Full<Bytes>>>> fmt::Debug for BufferRequestBodyFuture<B, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferRequestBodyFuture")
            .finish_non_exhaustive()
    }
}

impl<B, S> Future for BufferRequestBodyFuture<B, S>
where
    B: Body,
    B::Error: Into<BoxError>,
    S: Service<Request<Full<Bytes>>>,
    S::Error: Into<BoxError>,
{
    type Output = Result<S::Response, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Reading { body, call } => {
                    let bytes = match ready!(body.poll(cx)) {
                        Ok(bytes) => bytes,
                        Err(unread) => {
                            this.state.set(State::Done);
                            return Poll::Ready(Err(match unread {
                                Unread::TooLarge(err) => err.into(),
                                Unread::Body(err) => err,
                            }));
                        }
                    };
                    let Some((parts, mut inner)) = call.take() else {
                        panic!("BufferRequestBodyFuture polled after its inner call panicked");
                    };
                    let future = inner.call(Request::from_parts(parts, Full::new(bytes)));
                    this.state.set(State::Calling { future });
                }
                StateProj::Calling { future } => {
                    let output = ready!(future.poll(cx)).map_err(Into::into);
                    this.state.set(State::Done);
                    return Poll::Ready(output);
                }
                StateProj::Done => panic!("BufferRequestBodyFuture polled after completion"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full, StreamBody};
    use tokio_test::{assert_pending, assert_ready_ok};
    use tower::{service_fn, Layer, Service, ServiceExt};

    use super::BufferRequestBodyLayer;
    use crate::error::{BoxError, PayloadTooLarge};
    use crate::route::RouteInfo;

    fn chunks(
        chunks: &'static [&'static str],
    ) -> StreamBody<impl futures_util::Stream<Item = Result<http_body::Frame<Bytes>, std::io::Error>>>
    {
        let frames = chunks
            .iter()
            .map(|c| Ok(http_body::Frame::data(Bytes::from_static(c.as_bytes()))));
        StreamBody::new(futures_util::stream::iter(frames))
    }

    /// Echoes the body it got; counts its calls.
    fn echo(
        calls: Arc<AtomicUsize>,
    ) -> impl Service<
        http::Request<Full<Bytes>>,
        Response = http::Request<Full<Bytes>>,
        Error = BoxError,
    > + Clone {
        service_fn(move |req: http::Request<Full<Bytes>>| {
            calls.fetch_add(1, Ordering::Relaxed);
            async move { Ok::<_, BoxError>(req) }
        })
    }

    #[tokio::test]
    async fn the_body_is_read_whole_and_the_head_goes_on() {
        let calls = Arc::new(AtomicUsize::new(0));
        let svc = BufferRequestBodyLayer::new(16).layer(echo(calls.clone()));
        let mut req = http::Request::post("/infer")
            .header("x-model-id", "m")
            .body(chunks(&["hello, ", "world"]))
            .unwrap();
        let route = RouteInfo::new(crate::route::ModelId::new("m").unwrap());
        req.extensions_mut().insert(route);
        let got = svc.oneshot(req).await.unwrap();
        assert_eq!(
            (got.method(), got.uri().path()),
            (&http::Method::POST, "/infer")
        );
        assert_eq!(got.headers()["x-model-id"], "m");
        assert!(got.extensions().get::<RouteInfo>().is_some());
        let copy = got.clone();
        let bytes = got.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(bytes, "hello, world");
        assert_eq!(copy.into_body().collect().await.unwrap().to_bytes(), bytes);
        assert_eq!(calls.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn over_the_limit_fails_typed_and_calls_nothing() {
        let calls = Arc::new(AtomicUsize::new(0));
        let svc = BufferRequestBodyLayer::new(8).layer(echo(calls.clone()));
        // Read past the limit, in frames or in one.
        let streamed = http::Request::new(chunks(&["12345", "6789"]));
        let err = svc.clone().oneshot(streamed).await.unwrap_err();
        assert_eq!(
            err.downcast_ref::<PayloadTooLarge>(),
            Some(&PayloadTooLarge::new(8))
        );
        let sized = http::Request::new(Full::new(Bytes::from_static(b"123456789")));
        let err = svc.clone().oneshot(sized).await.unwrap_err();
        assert!(err.is::<PayloadTooLarge>(), "{err}");
        assert_eq!(calls.load(Ordering::Relaxed), 0, "nothing sent");
        // Exactly the limit passes.
        let full = http::Request::new(chunks(&["1234", "5678"]));
        assert!(svc.oneshot(full).await.is_ok());
        assert_eq!(calls.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_body_error_is_returned_and_nothing_is_sent() {
        let calls = Arc::new(AtomicUsize::new(0));
        let svc = BufferRequestBodyLayer::new(64).layer(echo(calls.clone()));
        let broken = futures_util::stream::iter([
            Ok(http_body::Frame::data(Bytes::from_static(b"ab"))),
            Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
        ]);
        let req = http::Request::new(StreamBody::new(broken));
        let err = svc.oneshot(req).await.unwrap_err();
        let io = err
            .downcast_ref::<std::io::Error>()
            .expect("the body's error");
        assert_eq!(io.kind(), std::io::ErrorKind::ConnectionReset);
        assert_eq!(calls.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn readiness_is_the_inner_services() {
        let (mock, mut handle) = tower_test::mock::pair::<http::Request<Full<Bytes>>, &str>();
        let mut svc = tower_test::mock::Spawn::new(BufferRequestBodyLayer::new(64).layer(mock));
        handle.allow(0);
        type Req = http::Request<Full<Bytes>>;
        assert_pending!(svc.poll_ready::<Req>());
        handle.allow(1);
        assert_ready_ok!(svc.poll_ready::<Req>());
        let rsp = svc.call(http::Request::new(Full::new(Bytes::from_static(b"ab"))));
        // The body is read, then the service made ready is called.
        let server = async move {
            let (req, send) = handle.next_request().await.unwrap();
            assert_eq!(req.into_body().collect().await.unwrap().to_bytes(), "ab");
            send.send_response("done");
        };
        let (rsp, ()) = tokio::join!(rsp, server);
        assert_eq!(rsp.unwrap(), "done");
    }
}
