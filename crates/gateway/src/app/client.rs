//! The HTTP client the gateway sends to its backends with, one for every
//! backend (each request's origin set by `SetOrigin`): hyper-util's legacy
//! client, its connections pooled per origin. The bare proxy (`bare`)
//! builds the same, so that the peer comparison's floor pools and sends
//! as the gateway does.

use std::time::Duration;

use hyper::body::Body;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioTimer};

/// How long a pooled connection may stay idle: less than the 5 s after
/// which uvicorn (MLServer, KServe's server and vLLM run on it) closes a
/// kept-alive connection.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(4);

/// The backends' client, for request bodies of type `B`, giving up on a
/// connection not made within `connect_timeout`; inside a Tokio runtime.
pub fn backend_client<B>(connect_timeout: Duration) -> Client<HttpConnector, B>
where
    B: Body + Send + 'static,
    B::Data: Send,
{
    // No Nagle: a request's head and body go out as written, not held
    // back until the server acknowledges the last segment (with delayed
    // ACKs, a 40 ms stall per request on a kept-alive connection).
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(connect_timeout));
    Client::builder(TokioExecutor::new())
        // Idle connections are dropped before the server drops them: a
        // request sent on a connection as the server closes it fails
        // (`SendRequest`, a 502).
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        // Without a timer the idle timeout is never checked.
        .pool_timer(TokioTimer::new())
        .build(connector)
}
