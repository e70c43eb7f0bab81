//! One client connection's life in the accept loop (`server`): served by
//! hyper over HTTP/1, its requests in flight counted, closed gracefully
//! when the drain begins, and closed at once when the gateway needs its
//! slot while it has no request in flight (as nginx reuses idle
//! keep-alive connections when it runs out).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpStream;
use tokio::sync::{watch, OwnedSemaphorePermit};
use tokio::time::Instant;

/// How long a new connection without a request is spared when room is
/// needed: its request may be on the way.
pub const FRESH: std::time::Duration = std::time::Duration::from_millis(500);

/// What every connection watches: the drain's start, and the calls for
/// idle connections to make room.
#[derive(Debug, Clone)]
pub struct Signals {
    pub draining: watch::Receiver<bool>,
    pub make_room: watch::Receiver<u64>,
}

/// Serves `stream` with `router` until the connection ends; `slot` is
/// released then.
pub async fn serve<S, B>(
    http: http1::Builder,
    stream: TcpStream,
    router: S,
    mut signals: Signals,
    slot: OwnedSemaphorePermit,
) where
    S: tower::Service<http::Request<Incoming>, Response = http::Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let opened = Instant::now();
    let in_flight = Arc::new(AtomicUsize::new(0));
    let served = Arc::new(AtomicBool::new(false));
    let service = Counted {
        inner: router,
        in_flight: in_flight.clone(),
        served: served.clone(),
    };
    let connection = http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
    tokio::pin!(connection);
    // Only calls made from now on are for this connection.
    signals.make_room.borrow_and_update();
    let mut closing = *signals.draining.borrow_and_update();
    if closing {
        connection.as_mut().graceful_shutdown();
    }
    loop {
        tokio::select! {
            ended = connection.as_mut() => {
                if let Err(error) = ended {
                    tracing::debug!(%error, "connection ended with an error");
                }
                break;
            }
            // The drain began, or the accept loop is gone: keep-alive
            // off, the request being served finishes, then the
            // connection closes (at once, if it has none).
            _ = signals.draining.changed(), if !closing => {
                connection.as_mut().graceful_shutdown();
                closing = true;
            }
            called = signals.make_room.changed(), if !closing => {
                // Idle: no request in flight, and kept alive after one
                // (or open a while without one). A connection just opened
                // may have its request on the way.
                let idle = in_flight.load(Ordering::Acquire) == 0
                    && (served.load(Ordering::Acquire) || opened.elapsed() >= FRESH);
                if called.is_err() || idle {
                    connection.as_mut().graceful_shutdown();
                    closing = true;
                }
            }
        }
    }
    drop(slot);
}

/// The router with the connection's requests in flight counted: from the
/// call to the end (or drop) of the answer's body.
#[derive(Debug, Clone)]
struct Counted<S> {
    inner: S,
    in_flight: Arc<AtomicUsize>,
    served: Arc<AtomicBool>,
}

impl<S, Q, B> tower::Service<http::Request<Q>> for Counted<S>
where
    S: tower::Service<http::Request<Q>, Response = http::Response<B>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = http::Response<CountedBody<B>>;
    type Error = Infallible;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Q>) -> Self::Future {
        let guard = InFlight::new(self.in_flight.clone());
        self.served.store(true, Ordering::Release);
        let answer = self.inner.call(req);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|inner| CountedBody {
                inner,
                _guard: guard,
            }))
        })
    }
}

/// One request counted in flight until dropped.
#[derive(Debug)]
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn new(count: Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Self(count)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

pin_project_lite::pin_project! {
    /// An answer's body, its request counted in flight until it is
    /// dropped.
    #[derive(Debug)]
    pub struct CountedBody<B> {
        #[pin]
        inner: B,
        _guard: InFlight,
    }
}

impl<B: Body> Body for CountedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        self.project().inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
