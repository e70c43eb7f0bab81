//! Turning one shared HTTP client into an endpoint per backend.
//!
//! Balancers need one `Service` per backend; HTTP clients (hyper-util's
//! legacy `Client`, reqwest-like stacks) are one `Service` for every host.
//! [`SetOrigin`] bridges the two: it sends each request to one backend by
//! setting the scheme and authority of the request URI, keeping its path and
//! query. Clones share the client and its connection pool.
//!
//! A gateway passes its clients' requests on through `SetOrigin`, so it
//! also does what a proxy must to each request's headers:
//!
//! * the `Host` header is set to the backend's authority (`10.0.0.7:8000`),
//!   replacing the one the client sent (the gateway's own name): a backend
//!   that checks `Host`, or routes virtual hosts by it, sees its own. Over
//!   HTTP/2 the `:authority` pseudo-header is taken from the URI, which
//!   `SetOrigin` rewrites, so it names the backend too;
//! * the hop-by-hop headers are removed ([`strip_hop_by_hop`], RFC 9110
//!   §7.6.1): they describe the client's connection to the gateway, not the
//!   gateway's to the backend. `TE: trailers` stays, for gRPC.
//!
//! The response is passed back as the inner service returns it: a gateway
//! strips the response's hop-by-hop headers with [`strip_hop_by_hop`]
//! before answering its client.
//!
//! Feature `reqwest`: [`ReqwestEndpoint`] makes a `reqwest::Client` such a
//! client (a `Service<http::Request<B>>`), with no adapter of your own.
//!
//! ```
//! use tower::{service_fn, ServiceExt};
//! use tower_model_balance::endpoint::SetOrigin;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let client = service_fn(|req: http::Request<()>| async move {
//!     Ok::<_, std::convert::Infallible>(req.uri().to_string())
//! });
//! let endpoint = SetOrigin::new(client, "http://10.0.0.7:8000").unwrap();
//! let req = http::Request::get("/v2/health/ready").body(()).unwrap();
//! assert_eq!(endpoint.clone().oneshot(req).await.unwrap(), "http://10.0.0.7:8000/v2/health/ready");
//!
//! // The backend's own Host, whatever the client sent.
//! let client = service_fn(|req: http::Request<()>| async move {
//!     Ok::<_, std::convert::Infallible>(req.headers()["host"].clone())
//! });
//! let endpoint = SetOrigin::new(client, "http://10.0.0.7:8000").unwrap();
//! let req = http::Request::get("/").header("host", "gateway.example").body(()).unwrap();
//! assert_eq!(endpoint.oneshot(req).await.unwrap(), "10.0.0.7:8000");
//! assert!(SetOrigin::new((), "not a uri").is_err());
//! assert!(SetOrigin::new((), "http://10.0.0.7:8000/prefix").is_err(), "a path would be dropped");
//! assert!(SetOrigin::new((), "ftp://10.0.0.7").is_err());
//! # }
//! ```

use std::fmt;
use std::net::SocketAddr;
use std::task::{Context, Poll};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme, Uri};
use tower_service::Service;

use crate::error::common::InvalidConfig;

#[cfg(feature = "reqwest")]
pub mod future;
#[cfg(feature = "reqwest")]
mod reqwest_client;

#[cfg(feature = "reqwest")]
pub use self::reqwest_client::ReqwestEndpoint;

/// Sends every request to one origin (scheme and authority), with the
/// origin's `Host` and without hop-by-hop headers; see the
/// [module docs](self).
///
/// It neither sheds nor applies backpressure of its own: `poll_ready` is the
/// inner service's, and `call` forwards whether or not it was polled
/// ready: the inner service's contract applies (the crate's
/// [readiness contract](crate#readiness)).
#[derive(Debug, Clone)]
pub struct SetOrigin<S> {
    inner: S,
    scheme: Scheme,
    authority: Authority,
    /// The authority as a `Host` value, made once.
    host: Option<HeaderValue>,
}

/// Where a backend is reached: an `http://` or `https://` scheme and a host
/// with an optional port, nothing else. Backend metadata carries one
/// ([`BackendMeta::with_address`](crate::backend::BackendMeta::with_address));
/// probes and [`SetOrigin`] send to it.
///
/// ```
/// use tower_model_balance::endpoint::Origin;
///
/// let origin = Origin::parse("http://10.0.0.7:8000").unwrap();
/// assert_eq!(origin.to_string(), "http://10.0.0.7:8000");
/// assert_eq!(origin.uri("/v2/health/ready").unwrap(), "http://10.0.0.7:8000/v2/health/ready");
/// let addr = "127.0.0.1:9000".parse().unwrap();
/// assert_eq!(Origin::http(addr).to_string(), "http://127.0.0.1:9000");
/// assert!(Origin::parse("http://[::1]:8000").is_ok());
/// for bad in ["http://h:99999", "http://h:", "http://[fe80::1%eth0]:80", "http://h#top", "ftp://h"] {
///     assert!(Origin::parse(bad).is_err(), "{bad}");
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    scheme: Scheme,
    authority: Authority,
}

impl Origin {
    /// Parses an origin such as `http://127.0.0.1:8000`.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming `origin` unless it is `http://` or
    /// `https://` with a host (and optional port in 0 ..= 65535) and
    /// nothing else: no path beyond `/`, no query, no fragment, no user
    /// info, no unencoded IPv6 zone.
    pub fn parse(origin: &str) -> Result<Self, InvalidConfig> {
        let invalid = || {
            InvalidConfig::new(
                "origin",
                "http:// or https:// with host[:port] and no path, query or user info",
            )
        };
        let uri: Uri = origin.parse().map_err(|_| invalid())?;
        let parts = uri.into_parts();
        let bare_path = parts
            .path_and_query
            .as_ref()
            .is_none_or(|p| p.as_str() == "/");
        let http = parts
            .scheme
            .as_ref()
            .is_some_and(|s| *s == Scheme::HTTP || *s == Scheme::HTTPS);
        let plain_authority = parts.authority.as_ref().is_some_and(|a| {
            !a.as_str().contains('@')
                && !a.host().is_empty()
                // An unencoded IPv6 zone, an empty or out-of-range port.
                && !a.host().contains('%')
                && (a.as_str().len() == a.host().len() || a.port_u16().is_some())
        });
        if !(bare_path && http && plain_authority) || origin.contains('#') {
            return Err(invalid());
        }
        match (parts.scheme, parts.authority) {
            (Some(scheme), Some(authority)) => Ok(Self { scheme, authority }),
            _ => Err(invalid()),
        }
    }

    /// `http://` to a socket address (`[..]` around an IPv6 host).
    pub fn http(addr: SocketAddr) -> Self {
        let authority =
            Authority::try_from(addr.to_string()).expect("a socket address is a valid authority");
        Self {
            scheme: Scheme::HTTP,
            authority,
        }
    }

    /// The scheme: `http` or `https`.
    pub fn scheme(&self) -> &Scheme {
        &self.scheme
    }

    /// The host and optional port.
    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// The URI of `path_and_query` (such as `/v2/health/ready`) at this
    /// origin.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming `path` when `path_and_query` is not a valid
    /// absolute path.
    pub fn uri(&self, path_and_query: &str) -> Result<Uri, InvalidConfig> {
        let invalid = || InvalidConfig::new("path", "an absolute path such as /v2/health/ready");
        if !path_and_query.starts_with('/') {
            return Err(invalid());
        }
        let path = PathAndQuery::try_from(path_and_query).map_err(|_| invalid())?;
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(path)
            .build()
            .map_err(|_| invalid())
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}", self.scheme, self.authority)
    }
}

impl<S> SetOrigin<S> {
    /// Wraps `inner` to send to `origin`, such as `http://127.0.0.1:8000`.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming `origin` unless it is `http://` or
    /// `https://` with a host (and optional port) and nothing else: no path
    /// beyond `/`, no query, no user info (see [`Origin::parse`]).
    pub fn new(inner: S, origin: &str) -> Result<Self, InvalidConfig> {
        Ok(Self::to(inner, Origin::parse(origin)?))
    }

    /// Wraps `inner` to send to `origin`.
    pub fn to(inner: S, origin: Origin) -> Self {
        // An authority is visible ASCII, always a valid header value; were
        // it not, the client would set `Host` from the URI.
        let host = HeaderValue::from_str(origin.authority.as_str()).ok();
        Self {
            inner,
            scheme: origin.scheme,
            authority: origin.authority,
            host,
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Consumes the wrapper, returning the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, B> Service<http::Request<B>> for SetOrigin<S>
where
    S: Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        let mut parts = std::mem::take(req.uri_mut()).into_parts();
        parts.scheme = Some(self.scheme.clone());
        parts.authority = Some(self.authority.clone());
        if parts.path_and_query.is_none() {
            parts.path_and_query = Some(PathAndQuery::from_static("/"));
        }
        // Scheme, authority and path are all set: `from_parts` accepts that.
        if let Ok(uri) = Uri::from_parts(parts) {
            *req.uri_mut() = uri;
        }
        let headers = req.headers_mut();
        // First: a `Connection` header naming `host` must not remove ours.
        strip_hop_by_hop(headers);
        match &self.host {
            Some(host) => headers.insert(header::HOST, host.clone()),
            None => headers.remove(header::HOST),
        };
        self.inner.call(req)
    }
}

/// Removes the hop-by-hop headers a proxy must not pass on (RFC 9110
/// §7.6.1): `Connection` and every header it names, `Proxy-Connection`,
/// `Keep-Alive`, `TE`, `Transfer-Encoding` and `Upgrade`. They describe one
/// connection, not the message. `TE: trailers` is kept (as `TE: trailers`,
/// its other codings dropped) when the client sent it: gRPC servers require
/// it, and it says the trailers, which a proxy passes on, are welcome.
///
/// [`SetOrigin`] calls it on every request; call it on a response before
/// passing it back to a client. A name in `Connection` that is not a valid
/// header name is skipped; nothing here fails or panics. It allocates only
/// when a `Connection` header names other headers.
///
/// ```
/// use http::HeaderMap;
/// use tower_model_balance::endpoint::strip_hop_by_hop;
///
/// let mut headers = HeaderMap::new();
/// headers.insert("connection", "close, x-foo".parse().unwrap());
/// headers.insert("x-foo", "1".parse().unwrap());
/// headers.insert("te", "trailers, deflate".parse().unwrap());
/// headers.insert("content-type", "application/grpc".parse().unwrap());
/// strip_hop_by_hop(&mut headers);
/// assert_eq!(headers.len(), 2);
/// assert_eq!(headers["te"], "trailers");
/// assert_eq!(headers["content-type"], "application/grpc");
/// ```
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // The common case, none of them: one pass comparing names, no hashing.
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    if headers.contains_key(header::CONNECTION) {
        let named: Vec<HeaderName> = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
            .collect();
        for name in named {
            headers.remove(name);
        }
    }
    let trailers = headers.get_all(header::TE).iter().any(|value| {
        value.to_str().is_ok_and(|value| {
            value.split(',').any(|coding| {
                let name = coding.split(';').next().unwrap_or_default();
                name.trim().eq_ignore_ascii_case("trailers")
            })
        })
    });
    for name in [
        header::CONNECTION,
        HeaderName::from_static("proxy-connection"),
        HeaderName::from_static("keep-alive"),
        header::TE,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
    if trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
}

/// Whether `name` is always hop-by-hop (those a `Connection` header names
/// are too, but only it can say which).
fn is_hop_by_hop(name: &HeaderName) -> bool {
    name == header::CONNECTION
        || name == header::TE
        || name == header::TRANSFER_ENCODING
        || name == header::UPGRADE
        || name.as_str() == "proxy-connection"
        || name.as_str() == "keep-alive"
}
