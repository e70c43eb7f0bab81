//! The bare proxy: the floor the peer comparison measures the gateway
//! against. The same runtime (`#[tokio::main]`, a worker per core), the
//! same accept loop ([`serve`](crate::app::serve)) and the same pooled
//! client ([`backend_client`]) with the same origin rewriting
//! ([`SetOrigin`]: the URI, `Host`, hop-by-hop headers) as the gateway,
//! and nothing else: round robin over the backends, no layers, no body
//! read (the request's body streams through as it comes), no routes (every
//! method and path is forwarded). What it costs is the hop's own cost.
//!
//! A request may name its backend by index in [`STEER_HEADER`] (removed
//! before it is sent on): the peer comparison's `bare oracle` row sends
//! each request where the oracle's placement would, so that the floor's
//! servers do the direct row's work — round robin makes most requests
//! cold loads, held open for 300 ms, a different load on the proxy.
//!
//! ```text
//! bare-proxy --listen 127.0.0.1:8081 --backend http://10.0.0.1:8000 --backend http://10.0.0.2:8000
//! ```

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use clap::Parser as _;
use http_body_util::{Either, Empty};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use tower::{Service, ServiceExt as _};
use tower_model_balance::endpoint::{strip_hop_by_hop, Origin, SetOrigin};

use crate::app::backend_client;
use crate::cli::{clap_error, http_origin, message, Stop};

/// The usage, printed for `--help` and after a bad flag.
pub const USAGE: &str = "\
usage: bare-proxy --backend URL [--backend URL ...] [--listen ADDR]

  --listen ADDR   address to serve on (default 127.0.0.1:8080)
  --backend URL   a backend's origin, e.g. http://10.0.0.1:8000 (repeatable,
                  at least one): requests go to each in turn, but for one
                  whose x-bare-backend header gives a backend's index (from 0,
                  in --backend order): it goes there, the header removed
  -h, --help      this text";

/// The request header naming the backend to send to by its index among
/// the `--backend`s (from 0); a value that names none is ignored (round
/// robin).
pub const STEER_HEADER: http::HeaderName = http::HeaderName::from_static("x-bare-backend");

/// The command line as clap reads it, each value checked; `USAGE` is its
/// help.
#[derive(Debug, clap::Parser)]
#[command(name = "bare-proxy", disable_version_flag = true)]
struct Flags {
    #[arg(long, value_parser = listen)]
    listen: Option<SocketAddr>,
    #[arg(long, value_parser = backend)]
    backend: Vec<Origin>,
}

fn listen(text: &str) -> Result<SocketAddr, String> {
    text.parse()
        .map_err(|_| format!("--listen: `{text}` is not an address like 127.0.0.1:8080"))
}

fn backend(text: &str) -> Result<Origin, String> {
    http_origin("--backend", text).map_err(message)
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Args {
    /// `--listen`.
    pub listen: SocketAddr,
    /// `--backend`s, in order.
    pub backends: Vec<Origin>,
}

impl Args {
    /// The flags in `args` (the program's name left out).
    ///
    /// # Errors
    ///
    /// `--help`, or a bad flag: the message names it.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, Stop> {
        let argv = std::iter::once("bare-proxy".to_owned()).chain(args);
        let Flags {
            listen,
            backend: backends,
        } = Flags::try_parse_from(argv).map_err(clap_error)?;
        if backends.is_empty() {
            return Err(Stop::Error("give at least one --backend".to_owned()));
        }
        Ok(Args {
            listen: listen.unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8080))),
            backends,
        })
    }
}

/// An answer's body: the backend's, streamed on, or none (the proxy's own
/// 502).
pub type ProxyBody = Either<Incoming, Empty<Bytes>>;

type Backend = SetOrigin<Client<HttpConnector, Incoming>>;

/// Round robin over the backends, one pooled client for all.
#[derive(Debug, Clone)]
pub struct BareProxy {
    backends: Arc<[Backend]>,
    next: Arc<AtomicUsize>,
}

impl BareProxy {
    /// A proxy in front of `backends`, `None` without any; inside a Tokio
    /// runtime.
    pub fn new(backends: &[Origin]) -> Option<Self> {
        if backends.is_empty() {
            return None;
        }
        let client = backend_client::<Incoming>(crate::app::Timeouts::default().connect);
        let backends = backends
            .iter()
            .map(|origin| SetOrigin::to(client.clone(), origin.clone()))
            .collect();
        Some(BareProxy {
            backends,
            next: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Sends `req` to the backend its [`STEER_HEADER`] names, else to the
    /// next in turn, and its answer back (the hop-by-hop headers removed,
    /// the body streamed on); 502 when the backend cannot be reached.
    pub async fn forward(&self, mut req: http::Request<Incoming>) -> http::Response<ProxyBody> {
        let steered = req.headers_mut().remove(STEER_HEADER).and_then(|v| {
            let i: usize = v.to_str().ok()?.parse().ok()?;
            (i < self.backends.len()).then_some(i)
        });
        let turn = match steered {
            Some(i) => i,
            None => self.next.fetch_add(1, Ordering::Relaxed) % self.backends.len(),
        };
        let backend = self.backends[turn].clone();
        match backend.oneshot(req).await {
            Ok(rsp) => {
                let (mut parts, body) = rsp.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                http::Response::from_parts(parts, Either::Left(body))
            }
            Err(error) => {
                tracing::debug!(%error, backend = turn, "the backend could not be reached");
                let mut rsp = http::Response::new(Either::Right(Empty::new()));
                *rsp.status_mut() = http::StatusCode::BAD_GATEWAY;
                rsp
            }
        }
    }

    /// The proxy as the service [`serve`](crate::app::serve) takes.
    pub fn into_service(
        self,
    ) -> impl Service<
        http::Request<Incoming>,
        Response = http::Response<ProxyBody>,
        Error = Infallible,
        Future = impl Send,
    > + Clone
           + Send
           + 'static {
        tower::service_fn(move |req| {
            let proxy = self.clone();
            async move { Ok::<_, Infallible>(proxy.forward(req).await) }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, Stop> {
        Args::parse(args.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn flags() {
        let args = parse(&[
            "--backend",
            "http://127.0.0.1:9",
            "--backend",
            "http://[::1]:8",
        ])
        .unwrap();
        assert_eq!(args.backends.len(), 2);
        assert_eq!(args.listen, SocketAddr::from(([127, 0, 0, 1], 8080)));
        for (args, says) in [
            (&[][..], "at least one --backend"),
            (&["--backend", "https://x:1"], "only http://"),
            (&["--backend"], "needs a value"),
            (
                &["--listen", "nowhere", "--backend", "http://a:1"],
                "not an address",
            ),
            (
                &[
                    "--listen",
                    "127.0.0.1:1",
                    "--listen",
                    "127.0.0.1:2",
                    "--backend",
                    "http://a:1",
                ],
                "twice",
            ),
            (&["--bogus"], "unknown flag"),
        ] {
            match parse(args) {
                Err(Stop::Error(message)) => assert!(message.contains(says), "{args:?}: {message}"),
                other => panic!("{args:?}: {other:?}"),
            }
        }
        assert_eq!(parse(&["-h"]), Err(Stop::Help));
    }
}
