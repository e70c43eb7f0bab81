//! Serving the gateway's router (or the bare proxy, `bare`) over HTTP/1: a
//! header-read timeout per connection, and a bounded graceful shutdown.

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use hyper::body::{Body, Incoming};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;

/// The most a client may take to send a request's headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long connections may finish their requests once shutdown begins.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Serves `router` (any `tower::Service` of hyper's requests that does not
/// fail: axum's `Router`, the bare proxy) on `listener` over HTTP/1 until
/// `shutdown` resolves, then lets open connections finish for at most
/// [`SHUTDOWN_GRACE`].
///
/// Unlike `axum::serve`, each connection has a header-read timeout
/// ([`HEADER_TIMEOUT`]: a client that trickles its headers is cut off), and
/// shutdown is bounded: a client that never finishes cannot keep the
/// gateway up.
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
    let graceful = GracefulShutdown::new();
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    // Answers go out as written (see the client's nodelay).
                    if let Err(error) = stream.set_nodelay(true) {
                        tracing::debug!(%error, "TCP_NODELAY not set");
                    }
                    stream
                }
                // Out of file descriptors, a connection reset before it
                // was accepted: the next accept may succeed.
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let service = TowerToHyperService::new(router.clone());
        let connection = http.serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the shutdown grace; closing");
    }
    Ok(())
}
