//! [`ReqwestEndpoint`]: a `reqwest::Client` as the `Service<http::Request<B>>`
//! the balancer and the layers take (feature `reqwest`).

use std::task::{Context, Poll};

use tower_service::Service;

use super::future::ResponseFuture;

/// A `reqwest::Client` as an endpoint: a `Service<http::Request<B>>`
/// answering `http::Response<reqwest::Body>` (feature `reqwest`).
///
/// `reqwest::Client` is a `Service<reqwest::Request>` answering
/// `reqwest::Response`; the balancer, the hedge and [`SetOrigin`](super::SetOrigin)
/// read and write `http` types (headers, extensions, the URI). This converts
/// both ways with reqwest's own conversions: the request by
/// `reqwest::Request::try_from` (any body `B: Into<reqwest::Body>`:
/// `String`, `Vec<u8>`, `Bytes`, `&'static str`, `reqwest::Body`), the
/// response into an `http::Response<reqwest::Body>`, whose body is an
/// `http_body::Body`: the balancer and the breaker record the outcome at
/// the end of the stream, as over hyper. Clones share the client and its
/// connection pool.
///
/// Put one behind [`SetOrigin`](super::SetOrigin) per backend: the request's
/// URI is then the backend's. Hand the backends to the balancer through
/// [`discover::Static`](crate::discover::Static), as below: tower's
/// `ServiceList::new` asks for the request type and cannot infer it over an
/// endpoint that takes any body (E0283, "cannot satisfy `_: Into<Body>`"). A request whose URI reqwest cannot send (no
/// scheme or host: a path-only URI outside `SetOrigin`) fails with
/// reqwest's builder error; nothing is sent.
///
/// Always ready: `poll_ready` is `reqwest::Client`'s (it queues nothing;
/// the pool's limits are reqwest's). The crate's `reqwest` dependency has
/// no default features (HTTP/1, no TLS); enable reqwest's own features
/// (`rustls-tls`, `http2`, …) in your `Cargo.toml`, Cargo adds them to the
/// same crate.
///
/// ```no_run
/// use tower::ServiceExt;
/// use tower_model_balance::backend::{Backend, BackendId};
/// use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
/// use tower_model_balance::discover::Static;
/// use tower_model_balance::endpoint::{ReqwestEndpoint, SetOrigin};
///
/// # #[tokio::main] async fn main() -> Result<(), tower::BoxError> {
/// let client = reqwest::Client::new();
/// let mut backends = Vec::new();
/// for origin in ["http://10.0.0.1:8000", "http://10.0.0.2:8000"] {
///     let endpoint = SetOrigin::new(ReqwestEndpoint::new(client.clone()), origin)?;
///     backends.push(Backend::new(BackendId::new(origin)?, endpoint));
/// }
/// let balancer = ModelBalancer::new(Static::new(backends)?, BalanceConfig::default())?;
///
/// let request = http::Request::post("/v1/completions")
///     .header("x-model-id", "llama-3-8b")
///     .body(r#"{"model": "llama-3-8b", "prompt": "hi"}"#)?;
/// let response = ServiceExt::oneshot(balancer, request).await?;
/// println!("{}", response.status());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ReqwestEndpoint {
    client: reqwest::Client,
}

impl ReqwestEndpoint {
    /// An endpoint sending through `client` (cloned per request: a
    /// reference count).
    pub fn new(client: reqwest::Client) -> Self {
        Self { client }
    }

    /// The client.
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }
}

impl<B> Service<http::Request<B>> for ReqwestEndpoint
where
    B: Into<reqwest::Body>,
{
    type Response = http::Response<reqwest::Body>;
    type Error = reqwest::Error;
    type Future = ResponseFuture;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Service::<reqwest::Request>::poll_ready(&mut self.client, cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        match reqwest::Request::try_from(req) {
            Ok(req) => ResponseFuture::sending(self.client.call(req)),
            Err(error) => ResponseFuture::failed(error),
        }
    }
}
