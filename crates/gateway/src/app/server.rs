//! Serving the gateway's router (or the bare proxy, `bare`) over HTTP/1: a
//! bound on the connections open at once, a header-read timeout per
//! connection, accept errors backed off, and the drain (`drain`) when the
//! shutdown future resolves.
//!
//! The connections the accept loop closes itself are counted on the
//! admin listener's `/metrics` (`connection.rs` has the table):
//! `gateway_connections_closed_total{listener, reason}` with reasons
//! `connection_limit` (refused at the bound, after a 503),
//! `idle_for_room` (an idle connection closed to make room) and
//! `header_timeout` (no whole request head within
//! [`ServeConfig::header_timeout`]), and the gauges
//! `gateway_connections_open{listener}` and
//! `gateway_connections_waiting{listener}` (accepted at the bound, waiting
//! for room).

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::server::conn::http1;
use hyper_util::rt::TokioTimer;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use super::connection::{self, Signals};
use super::drain::Drain;

/// The most a client may take to send a request's headers, and the most
/// a connection may sit open without one (hyper starts the timer when it
/// waits for a request head).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The default drain: five minutes, long enough for a stream of 9,000
/// tokens at 30 tokens a second to finish.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(300);
/// The default most connections open at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// How long connections may take to close once the drain cut what was
/// still open (each answer ends at the cut: this is for the bytes to go).
pub const CUT_GRACE: Duration = Duration::from_secs(5);
/// How long a connection accepted at the bound waits for room.
const ROOM_WAIT: Duration = Duration::from_secs(1);
/// The most connections waiting for room at once, each in a task of its
/// own; past it a new connection at the bound is refused at once.
const MAX_WAITING: usize = 64;
/// The first wait after an accept error, doubled at each error in a row.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(5);
/// The longest wait after an accept error.
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// How a listener serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServeConfig {
    /// The most connections open at once (default 10,000): at the bound
    /// a new connection takes the slot of one without a request in flight
    /// (closed for it), else is answered 503 `gateway_overloaded` with
    /// `Retry-After: 1` and closed.
    pub max_connections: usize,
    /// The most a connection may take to send a request's head, or sit
    /// idle waiting for one (default [`HEADER_TIMEOUT`], 10 s).
    pub header_timeout: Duration,
    /// How long answers in flight may take to finish once the drain
    /// begins (default [`DEFAULT_DRAIN_TIMEOUT`], 300 s); past it they
    /// are cut.
    pub drain_timeout: Duration,
    /// The `listener` label of the connection series
    /// (`gateway_connections_*`): `public` by default; the binary serves
    /// its admin listener as `admin`.
    pub listener: &'static str,
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: HEADER_TIMEOUT,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            listener: "public",
        }
    }
}

/// Serves `router` on `listener` with [`ServeConfig::default`] and a drain
/// of its own (see [`serve_with`]).
pub async fn serve<S, B>(
    listener: TcpListener,
    router: S,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()>
where
    S: tower::Service<http::Request<Incoming>, Response = http::Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    serve_with(
        listener,
        router,
        shutdown,
        ServeConfig::default(),
        &Drain::new(),
    )
    .await
}

/// Serves `router` (any `tower::Service` of hyper's requests that does not
/// fail: axum's `Router`, the bare proxy) on `listener` over HTTP/1 until
/// `shutdown` resolves, then drains:
///
/// 1. `drain` begins (the gateway's readiness answers 503) and the
///    listener closes: a new connection is refused;
/// 2. each open connection finishes the request it is serving and
///    closes (keep-alive off), for at most `config.drain_timeout`;
/// 3. past it, `drain` is cut: every answer still open ends with an error
///    its client can see (the gateway's bodies watch the cut), and the
///    connections get [`CUT_GRACE`] more to close.
///
/// Unlike `axum::serve`, at most `config.max_connections` are open at once
/// (past it, connections with no request in flight close to make room:
/// a client holding idle connections cannot lock others out; with none
/// for 1 s, the new connection is answered 503 and closed; it waits in a
/// task of its own, so that the accept loop goes on: at most
/// 64 at once, past it refused at once, and refused when the
/// drain begins), each has a
/// header-read timeout (a client that trickles its headers,
/// or holds a connection without a request, is cut off), an accept error
/// (out of file descriptors) is retried after a wait that doubles from
/// 5 ms to 1 s instead of at once, and the drain is bounded: a client that
/// never finishes cannot keep the gateway up.
pub async fn serve_with<S, B>(
    listener: TcpListener,
    router: S,
    shutdown: impl Future<Output = ()>,
    config: ServeConfig,
    drain: &Drain,
) -> std::io::Result<()>
where
    S: tower::Service<http::Request<Incoming>, Response = http::Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout);
    let max = config.max_connections.clamp(1, Semaphore::MAX_PERMITS);
    let slots = Arc::new(Semaphore::new(max));
    let (draining, draining_rx) = watch::channel(false);
    let make_room = Arc::new(watch::Sender::new(0u64));
    let make_room_rx = make_room.subscribe();
    let waiting = Arc::new(Semaphore::new(MAX_WAITING));
    let signals = Signals {
        draining: draining_rx,
        make_room: make_room_rx,
    };
    let mut backoff = Backoff::default();
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    backoff = Backoff::default();
                    // Answers go out as written (see the client's nodelay).
                    if let Err(error) = stream.set_nodelay(true) {
                        tracing::debug!(%error, "TCP_NODELAY not set");
                    }
                    stream
                }
                // Out of file descriptors, a connection reset before it
                // was accepted: the next accept may succeed, after a wait
                // (at once, an exhausted process would spin and log).
                Err(error) => {
                    let wait = backoff.next_wait();
                    if wait == ACCEPT_BACKOFF_MIN {
                        tracing::warn!(%error, "accept failed; backing off");
                    } else {
                        tracing::debug!(%error, ?wait, "accept failed again");
                    }
                    tokio::select! {
                        () = tokio::time::sleep(wait) => continue,
                        () = &mut shutdown => break,
                    }
                }
            },
            () = &mut shutdown => break,
        };
        // A slot for it: at the bound, the connections without a request
        // in flight close to make room, and the new one waits for it in a
        // task of its own, so that the loop goes on accepting (and the
        // next refusal, or the drain, is not held up by this wait).
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            match waiting.clone().try_acquire_owned() {
                Ok(waiter) => {
                    let room = Room {
                        slots: slots.clone(),
                        make_room: make_room.clone(),
                        max,
                    };
                    let wait = room.wait_then_serve(
                        http.clone(),
                        stream,
                        router.clone(),
                        signals.clone(),
                        config.listener,
                    );
                    tokio::spawn(async move {
                        wait.await;
                        drop(waiter);
                    });
                }
                // As many waiting as may: refused at once.
                Err(_) => {
                    tracing::debug!("at the connection bound, too many waiting: refusing");
                    tokio::spawn(connection::refuse(stream, config.listener, max));
                }
            }
            continue;
        };
        let connection = connection::serve(
            http.clone(),
            stream,
            router.clone(),
            signals.clone(),
            slot,
            config.listener,
        );
        tokio::spawn(connection);
    }
    drain.begin();
    drop(listener);
    let _ = draining.send(true);
    // Every connection closed: every slot back.
    let all = u32::try_from(max).unwrap_or(u32::MAX);
    let closed = slots.acquire_many(all);
    tokio::pin!(closed);
    if tokio::time::timeout(config.drain_timeout, &mut closed)
        .await
        .is_err()
    {
        tracing::warn!(
            "answers still open after the drain timeout ({:?}); cutting them",
            config.drain_timeout
        );
        drain.cut();
        if tokio::time::timeout(CUT_GRACE, closed).await.is_err() {
            tracing::warn!("connections still open after the cut; closing");
        }
    }
    Ok(())
}

/// What a connection accepted at the bound waits on: the slots, and the
/// calls for idle connections to close.
struct Room {
    slots: Arc<Semaphore>,
    make_room: Arc<watch::Sender<u64>>,
    max: usize,
}

impl Room {
    /// Waits for a slot for `stream` (see [`Room::make`]), then serves
    /// it; refuses it (503, `connection_limit`) if none comes, or once
    /// the drain begins: a draining gateway takes no new connection, and
    /// its drain does not wait for those waiting.
    async fn wait_then_serve<S, B>(
        self,
        http: http1::Builder,
        stream: TcpStream,
        router: S,
        signals: Signals,
        listener: &'static str,
    ) where
        S: tower::Service<
                http::Request<Incoming>,
                Response = http::Response<B>,
                Error = Infallible,
            > + Clone
            + Send
            + 'static,
        S::Future: Send + 'static,
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let waiting = connection::Gauged::waiting(listener);
        let mut draining = signals.draining.clone();
        // The drain begun, or the accept loop gone (its sender dropped).
        let drained = async move {
            let _ = draining.wait_for(|draining| *draining).await;
        };
        let slot = tokio::select! {
            biased;
            () = drained => None,
            slot = self.make() => slot,
        };
        drop(waiting);
        // Served, it holds no call for room: the calls end with the
        // accept loop (and those waiting).
        let max = self.max;
        drop(self);
        match slot {
            Some(slot) if !*signals.draining.borrow() => {
                connection::serve(http, stream, router, signals, slot, listener).await;
            }
            _ => {
                tracing::debug!(
                    "at the connection bound, every connection busy (or draining): refusing"
                );
                connection::refuse(stream, listener, max).await;
            }
        }
    }

    /// A slot freed by the idle connections, asked every quarter of
    /// [`connection::FRESH`] (those just opened become idle meanwhile) for
    /// at most [`ROOM_WAIT`]; `None` if none frees one.
    async fn make(&self) -> Option<OwnedSemaphorePermit> {
        let deadline = tokio::time::Instant::now() + ROOM_WAIT;
        loop {
            self.make_room.send_modify(|n| *n = n.wrapping_add(1));
            let ask_again = (tokio::time::Instant::now() + connection::FRESH / 4).min(deadline);
            let slot = self.slots.clone().acquire_owned();
            match tokio::time::timeout_at(ask_again, slot).await {
                Ok(Ok(slot)) => return Some(slot),
                Ok(Err(_)) => return None,
                Err(_) if ask_again >= deadline => return None,
                Err(_) => {}
            }
        }
    }
}

/// The wait after each accept error in a row: 5 ms, doubled each time,
/// at most 1 s.
#[derive(Debug, Default)]
struct Backoff {
    errors: u32,
}

impl Backoff {
    fn next_wait(&mut self) -> Duration {
        let wait = ACCEPT_BACKOFF_MIN.saturating_mul(1 << self.errors.min(16));
        self.errors = self.errors.saturating_add(1);
        wait.min(ACCEPT_BACKOFF_MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_errors_in_a_row_double_the_wait_up_to_a_second() {
        let mut backoff = Backoff::default();
        let waits: Vec<u64> = (0..12)
            .map(|_| backoff.next_wait().as_millis() as u64)
            .collect();
        assert_eq!(
            waits,
            [5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000, 1000]
        );
        for _ in 0..100 {
            assert_eq!(backoff.next_wait(), ACCEPT_BACKOFF_MAX);
        }
    }
}
