//! One client connection's life in the accept loop (`server`): served by
//! hyper over HTTP/1, its requests in flight counted, closed gracefully
//! when the drain begins, and closed at once when the gateway needs its
//! slot while it has no request in flight (as nginx reuses idle
//! keep-alive connections when it runs out); or, at the bound with every
//! connection busy, answered 503 and closed without being served
//! ([`refuse`]).
//!
//! What the gateway closes itself is counted, by listener
//! (`ServeConfig::listener`: `public`, or `admin` for the binary's admin
//! listener):
//!
//! | series | counts |
//! | --- | --- |
//! | `gateway_connections_closed_total{listener, reason="connection_limit"}` | connections refused at the bound (every connection busy for the wait for room, 1 s; or 64 already waiting; or waiting when the drain began), each answered 503 `gateway_overloaded` first |
//! | `gateway_connections_closed_total{listener, reason="idle_for_room"}` | idle connections closed to make room for a new one |
//! | `gateway_connections_closed_total{listener, reason="header_timeout"}` | connections hyper closed at its header read timeout: a request head not whole in time, or a kept-alive connection without a next request for as long (hyper runs one timer for both, and answers neither) |
//! | `gateway_connections_open{listener}` | connections open and served, each holding a slot of the bound |
//! | `gateway_connections_waiting{listener}` | connections accepted at the bound and waiting for room (1 s at most, 64 at most at once), each then served or refused |

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{watch, OwnedSemaphorePermit};
use tokio::time::Instant;

use super::limits;

/// How long a new connection without a request is spared when room is
/// needed: its request may be on the way.
pub const FRESH: Duration = Duration::from_millis(500);
/// The most a refused connection's 503 may take to be written: a client
/// that never reads cannot hold the task.
const REFUSAL_WRITE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a refused connection is read after its 503, what its client
/// sent discarded, until the client closes (nginx's `lingering_close`).
const REFUSAL_LINGER: Duration = Duration::from_secs(1);
/// The most bytes read from a refused connection after its 503.
const REFUSAL_LINGER_BYTES: usize = 64 * 1024;

/// The series counting connections the gateway closed itself, by
/// `listener` and `reason` ([`Closed`]).
pub const CLOSED_SERIES: &str = "gateway_connections_closed_total";
/// The gauge of connections open and served, by `listener`.
pub const OPEN_SERIES: &str = "gateway_connections_open";
/// The gauge of connections accepted at the bound and waiting for room,
/// by `listener`.
pub const WAITING_SERIES: &str = "gateway_connections_waiting";

/// Why the gateway closed a connection itself: the `reason` label of
/// [`CLOSED_SERIES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closed {
    /// Refused at the bound, every connection busy: answered 503.
    ConnectionLimit,
    /// Idle (no request in flight), closed to make room for a new one.
    IdleForRoom,
    /// hyper's header read timeout: no whole request head in time.
    HeaderTimeout,
}

impl Closed {
    /// The `reason` label.
    fn reason(self) -> &'static str {
        match self {
            Self::ConnectionLimit => "connection_limit",
            Self::IdleForRoom => "idle_for_room",
            Self::HeaderTimeout => "header_timeout",
        }
    }

    /// Counts one connection closed for this reason on `listener`.
    fn count(self, listener: &'static str) {
        metrics::counter!(CLOSED_SERIES, "listener" => listener, "reason" => self.reason())
            .increment(1);
    }
}

/// What every connection watches: the drain's start, and the calls for
/// idle connections to make room.
#[derive(Debug, Clone)]
pub struct Signals {
    pub draining: watch::Receiver<bool>,
    pub make_room: watch::Receiver<u64>,
}

/// Serves `stream` with `router` until the connection ends; `slot` is
/// released then. Counted open on `listener` meanwhile.
pub async fn serve<S, B>(
    http: http1::Builder,
    stream: TcpStream,
    router: S,
    mut signals: Signals,
    slot: OwnedSemaphorePermit,
    listener: &'static str,
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
    let _open = Gauged::open(listener);
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
                    // hyper 1.x ends the connection with a `Kind::HeaderTimeout`
                    // error, which `is_timeout` reports, when its header read
                    // timer fires (the only timer it runs for a server).
                    if error.is_timeout() {
                        Closed::HeaderTimeout.count(listener);
                    }
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
                    if called.is_ok() {
                        Closed::IdleForRoom.count(listener);
                    }
                    connection.as_mut().graceful_shutdown();
                    closing = true;
                }
            }
        }
    }
    drop(slot);
}

/// Answers a connection refused at the bound (`max` connections open,
/// each with a request in flight) and closes it, counted in
/// [`CLOSED_SERIES`] (`connection_limit`) on `listener`: the gateway's
/// 503 `gateway_overloaded` with `Retry-After: 1` and `Connection: close`,
/// written at once within [`REFUSAL_WRITE_TIMEOUT`], then the write side
/// shut (FIN).
///
/// The request is not read first: the answer does not depend on it, and
/// waiting for a head that comes slowly, or never, would hold the task.
/// (nginx's `limit_conn` answers 503 only once it has read a request head;
/// Envoy's connection limit closes without a word. An HTTP client reads
/// an answer sent before its request is whole, and backs off.) After the
/// 503, what the client sent is read and discarded until it closes, for
/// at most [`REFUSAL_LINGER`] and 64 KiB, as nginx's `lingering_close`
/// does and RFC 9112 §9.6 advises: closing a socket with unread bytes
/// sends a reset, which may destroy the 503 in the client's receive
/// buffer before it is read. The task lives at most 2 s: a flood at the
/// bound holds the connections of the last 2 s's refusals (the accept
/// loop no longer waits for room itself, see `server.rs`).
pub async fn refuse(mut stream: TcpStream, listener: &'static str, max: usize) {
    Closed::ConnectionLimit.count(listener);
    let reply = limits::overloaded(format!(
        "the gateway has {max} connections open, its limit, each with a request in flight"
    ));
    let answer = reply.into_http1_close();
    let write = async {
        stream.write_all(&answer).await?;
        stream.shutdown().await
    };
    match tokio::time::timeout(REFUSAL_WRITE_TIMEOUT, write).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => {
            tracing::debug!(%error, "a refused connection's 503 not written");
            return;
        }
        Err(_) => {
            tracing::debug!("a refused connection's 503 not written in time");
            return;
        }
    }
    let until = Instant::now() + REFUSAL_LINGER;
    let mut discarded = 0;
    let mut buf = vec![0; 4096];
    while discarded < REFUSAL_LINGER_BYTES {
        match tokio::time::timeout_at(until, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => discarded += n,
            // Closed by the client, an error, or the linger over.
            _ => break,
        }
    }
}

/// One connection counted in a gauge ([`OPEN_SERIES`],
/// [`WAITING_SERIES`]) until dropped.
#[derive(Debug)]
pub struct Gauged {
    series: &'static str,
    listener: &'static str,
}

impl Gauged {
    /// Counted open and served on `listener`.
    fn open(listener: &'static str) -> Self {
        Self::new(OPEN_SERIES, listener)
    }

    /// Counted waiting for room on `listener`.
    pub fn waiting(listener: &'static str) -> Self {
        Self::new(WAITING_SERIES, listener)
    }

    fn new(series: &'static str, listener: &'static str) -> Self {
        metrics::gauge!(series, "listener" => listener).increment(1.0);
        Self { series, listener }
    }
}

impl Drop for Gauged {
    fn drop(&mut self) {
        metrics::gauge!(self.series, "listener" => self.listener).decrement(1.0);
    }
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
