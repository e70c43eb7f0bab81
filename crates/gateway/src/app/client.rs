//! The HTTP client the gateway sends to its backends with, one for every
//! backend (each request's origin set by `SetOrigin`): hyper-util's legacy
//! client, its connections pooled per origin, over rustls for `https://`
//! backends. The bare proxy (`bare`) builds the same over plain TCP, so
//! that the peer comparison's floor pools and sends as the gateway does.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Body;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::{connect::HttpConnector, Builder, Client};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};

/// How long a pooled connection may stay idle: less than the 5 s after
/// which uvicorn (MLServer, KServe's server and vLLM run on it) closes a
/// kept-alive connection.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(4);

/// The connector of the gateway's client: `http://` as it is, `https://`
/// over rustls.
pub type BackendConnector = HttpsConnector<HttpConnector>;

/// The gateway's client of its backends ([`backend_tls_client`]), for
/// its requests' whole bodies.
pub type BackendClient = Client<BackendConnector, Full<Bytes>>;

/// The backends' client over plain TCP (`http://` only), for request
/// bodies of type `B`, giving up on a connection not made within
/// `connect_timeout`; inside a Tokio runtime.
pub fn backend_client<B>(connect_timeout: Duration) -> Client<HttpConnector, B>
where
    B: Body + Send + 'static,
    B::Data: Send,
{
    pooled().build(tcp(connect_timeout))
}

/// The backends' client for `http://` and `https://` backends: a
/// backend's certificate is checked against `roots` (the system's, or a
/// CA file's; see [`backend_roots`](super::tls::backend_roots)), by the
/// origin's host name (or IP address); a connection not made within
/// `connect_timeout` is given up.
pub fn backend_tls_client<B>(
    roots: RootCertStore,
    connect_timeout: Duration,
) -> Client<BackendConnector, B>
where
    B: Body + Send + 'static,
    B::Data: Send,
{
    // `ring`, as etcd's client: aws-lc-rs builds slowly here and needs
    // cmake. rustls 0.23.48 deprecates it for lacking post-quantum key
    // exchange (X25519MLKEM768): classical X25519 / P-256 until it has one.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports rustls's default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut http = tcp(connect_timeout);
    // The TLS connector hands it `https://` URIs too.
    http.enforce_http(false);
    let connector = HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    pooled().build(connector)
}

/// A root store of `certificates`.
pub(super) fn root_store(certificates: Vec<CertificateDer<'static>>) -> (RootCertStore, usize) {
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(certificates);
    (roots, added)
}

fn tcp(connect_timeout: Duration) -> HttpConnector {
    // No Nagle: a request's head and body go out as written, not held
    // back until the server acknowledges the last segment (with delayed
    // ACKs, a 40 ms stall per request on a kept-alive connection).
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(connect_timeout));
    connector
}

fn pooled() -> Builder {
    let mut builder = Client::builder(TokioExecutor::new());
    builder
        // Idle connections are dropped before the server drops them: a
        // request sent on a connection as the server closes it fails
        // (`SendRequest`, a 502).
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        // Without a timer the idle timeout is never checked.
        .pool_timer(TokioTimer::new());
    builder
}
