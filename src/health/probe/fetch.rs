//! The HTTP requests probes and loaders send: one GET or POST through a
//! [`ProbeClient`], the body read whole under a size cap.

use std::fmt;

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::{Connect, HttpConnector};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tower::util::BoxCloneSyncService;
use tower::{BoxError, ServiceExt};

use super::prober::ProbeError;
use crate::endpoint::Origin;

/// The HTTP client probers and placement loaders send with.
///
/// Cheap to clone; clones share one connection pool, so one client can
/// serve every prober and loader of a fleet. It carries no timeout of its
/// own: the probe runner and the placement policy bound each call.
///
/// * [`ProbeClient::new`] (and [`Default`]): hyper-util's legacy client
///   over plain HTTP/1 — `http://` origins only; a probe of an `https://`
///   origin fails with [`ProbeError::Transport`] (a loader's with
///   [`LoadError::Transport`](crate::placement::LoadError::Transport)).
/// * [`ProbeClient::from_client`]: any hyper-util client, on the caller's
///   connector. For `https://` origins, a TLS connector such as
///   `hyper_rustls::HttpsConnector<HttpConnector>`: the probes then check
///   certificates against the caller's roots, present its client
///   certificate, and share the pool, connect timeout and idle timeout of
///   the client the traffic goes through. The crate itself depends on no
///   TLS library.
///
/// ```
/// use std::time::Duration;
///
/// use bytes::Bytes;
/// use http_body_util::Full;
/// use hyper_util::client::legacy::{connect::HttpConnector, Client};
/// use hyper_util::rt::TokioExecutor;
/// use tower_model_balance::health::probe::{OpenAiModels, ProbeClient};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// // The client the traffic goes through (here plain TCP; an
/// // `HttpsConnector` over it for `https://` backends).
/// let mut connector = HttpConnector::new();
/// connector.set_connect_timeout(Some(Duration::from_secs(5)));
/// let traffic: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
///
/// let prober = OpenAiModels::new(ProbeClient::from_client(traffic.clone()));
/// # drop(prober);
/// # }
/// ```
#[derive(Clone)]
pub struct ProbeClient {
    inner: BoxCloneSyncService<Request<Full<Bytes>>, Response<Incoming>, BoxError>,
}

// === impl ProbeClient ===

impl ProbeClient {
    /// A client over plain HTTP/1 (`http://` only): hyper-util's legacy
    /// client with its defaults (idle connections kept 90 s, no connect
    /// timeout), and `TCP_NODELAY` on its sockets (a small request is sent
    /// at once, not held back by Nagle's algorithm for the server's
    /// delayed ACK). Inside a Tokio runtime when it sends.
    pub fn new() -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Self::from_client(Client::builder(TokioExecutor::new()).build(connector))
    }

    /// A client sending through `client`, on its connector: its schemes
    /// (`https://` with a TLS connector), its trust, its pool and its
    /// timeouts. Clones of the [`ProbeClient`] share `client`'s pool, and
    /// so does `client` itself and its other clones.
    ///
    /// What `client` fails with (a refused connection, a failed handshake,
    /// a scheme its connector does not speak) is the probe's
    /// [`ProbeError::Transport`], the loader's
    /// [`LoadError::Transport`](crate::placement::LoadError::Transport).
    pub fn from_client<C>(client: Client<C, Full<Bytes>>) -> Self
    where
        C: Connect + Clone + Send + Sync + 'static,
    {
        Self {
            inner: BoxCloneSyncService::new(client.map_err(BoxError::from)),
        }
    }

    /// Sends `request`, answering its response head (the body still to
    /// read).
    async fn request(&self, request: Request<Full<Bytes>>) -> Result<Response<Incoming>, BoxError> {
        self.inner.clone().oneshot(request).await
    }
}

impl Default for ProbeClient {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for ProbeClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProbeClient").finish_non_exhaustive()
    }
}

/// Largest response body a JSON probe endpoint may send: 1 MiB.
pub(crate) const MAX_JSON_BODY: usize = 1 << 20;

/// A response: its status and its whole body.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) body: Bytes,
}

impl Answer {
    /// The body of a 2xx answer; any other status is
    /// [`ProbeError::Status`].
    pub(crate) fn success(self) -> Result<Bytes, ProbeError> {
        if self.status.is_success() {
            Ok(self.body)
        } else {
            Err(ProbeError::Status(self.status))
        }
    }
}

/// Sends `GET path` (or `POST path` with a JSON `body`) to `origin` and
/// reads the response body whole, up to `limit` bytes.
///
/// Errors: [`ProbeError::Transport`] when the request cannot be sent or the
/// body not read; [`ProbeError::Malformed`] when the body exceeds `limit`.
/// The status is returned as it is, for the caller to judge.
pub(crate) async fn send(
    client: &ProbeClient,
    origin: &Origin,
    path: &str,
    json_body: Option<Bytes>,
    limit: usize,
) -> Result<Answer, ProbeError> {
    let uri = origin
        .uri(path)
        .map_err(|e| ProbeError::Transport(Box::new(e)))?;
    let builder = Request::builder().uri(uri);
    let request = match json_body {
        None => builder.method(Method::GET).body(Full::default()),
        Some(body) => builder
            .method(Method::POST)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(body)),
    }
    .map_err(|e| ProbeError::Transport(Box::new(e)))?;
    let response = client
        .request(request)
        .await
        .map_err(ProbeError::Transport)?;
    let status = response.status();
    let body = Limited::new(response.into_body(), limit)
        .collect()
        .await
        .map_err(|e| {
            if e.is::<http_body_util::LengthLimitError>() {
                ProbeError::malformed(format!("{path}: body larger than {limit} bytes"))
            } else {
                ProbeError::Transport(e)
            }
        })?
        .to_bytes();
    Ok(Answer { status, body })
}

#[cfg(test)]
mod tests {
    use std::future::{ready, Ready};
    use std::io;
    use std::sync::{Arc, Mutex};

    use http::Uri;
    use hyper_util::rt::TokioIo;
    use tokio::net::TcpStream;

    use super::*;

    /// A connector that opens no socket: it notes each URI it is asked
    /// for and refuses it.
    fn refusing(seen: Arc<Mutex<Vec<Uri>>>) -> impl Connect + Clone + Send + Sync + 'static {
        tower::service_fn(move |uri: Uri| -> Ready<io::Result<TokioIo<TcpStream>>> {
            seen.lock().unwrap().push(uri);
            ready(Err(io::Error::other("refused by the test connector")))
        })
    }

    fn origin(url: &str) -> Origin {
        Origin::parse(url).unwrap()
    }

    /// The chain of an error's messages, outermost first.
    fn chain(error: &ProbeError) -> String {
        let mut text = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(e) = source {
            text.push_str(&format!(" / {e}"));
            source = e.source();
        }
        text
    }

    #[tokio::test]
    async fn from_client_sends_https_through_the_callers_connector() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let client = Client::builder(TokioExecutor::new()).build(refusing(seen.clone()));
        let probe = ProbeClient::from_client(client);
        let https = origin("https://gpu-0.example:8443");
        let error = send(&probe, &https, "/v1/models", None, MAX_JSON_BODY)
            .await
            .unwrap_err();
        assert!(matches!(error, ProbeError::Transport(_)), "{error:?}");
        assert!(
            chain(&error).contains("refused by the test connector"),
            "{}",
            chain(&error)
        );
        // A clone sends through the same connector.
        let _ = send(
            &probe.clone(),
            &https,
            "/v2/health/ready",
            None,
            MAX_JSON_BODY,
        )
        .await;
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert!(
            seen.iter().all(|uri| uri.scheme_str() == Some("https")
                && uri.host() == Some("gpu-0.example")
                && uri.port_u16() == Some(8443)),
            "{seen:?}"
        );
    }

    #[tokio::test]
    async fn a_plain_client_refuses_https_without_connecting() {
        for probe in [ProbeClient::new(), ProbeClient::default()] {
            // Port 1 on loopback: were a connection tried, it would be
            // refused; the scheme is refused first.
            let error = send(
                &probe,
                &origin("https://127.0.0.1:1"),
                "/v1/models",
                None,
                MAX_JSON_BODY,
            )
            .await
            .unwrap_err();
            assert!(matches!(error, ProbeError::Transport(_)), "{error:?}");
            assert!(
                chain(&error).contains("scheme is not http"),
                "{}",
                chain(&error)
            );
        }
    }

    #[test]
    fn its_debug_names_it_and_nothing_inside() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let client = Client::builder(TokioExecutor::new()).build(refusing(seen));
        assert_eq!(
            format!("{:?}", ProbeClient::from_client(client)),
            "ProbeClient { .. }"
        );
    }
}
