//! The HTTP requests probes send: one GET or POST, the body read whole
//! under a size cap.

use bytes::Bytes;
use http::{header, Method, Request, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::prober::ProbeError;
use crate::endpoint::Origin;

/// The HTTP client probers send with: hyper-util's legacy client over plain
/// HTTP/1, pooling connections per host. Clones share the pool, so one
/// client can serve every prober of a fleet. It speaks `http://` only: a
/// probe of an `https://` origin fails with
/// [`ProbeError::Transport`](super::ProbeError::Transport).
pub type ProbeClient = Client<HttpConnector, Full<Bytes>>;

/// A new [`ProbeClient`] with hyper-util's defaults (idle connections kept
/// 90 s), and `TCP_NODELAY` on its sockets (a small request is sent at
/// once, not held back by Nagle's algorithm for the server's delayed ACK).
pub fn client() -> ProbeClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new()).build(connector)
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
        .map_err(|e| ProbeError::Transport(Box::new(e)))?;
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
