//! Prometheus metrics (`GET /metrics`) read into load signals.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;

use self::names::METRICS_PATH;
use self::parse::parse_metrics;
use super::fetch::{self, ProbeClient};
use super::prober::{ProbeError, ProbeReport, ProbeTarget, Prober};
use crate::endpoint::Origin;

/// Largest metrics body: 4 MiB (histograms per model add up).
const MAX_METRICS_BODY: usize = 4 << 20;

/// Probes a server's Prometheus metrics: `GET /metrics` in the text
/// exposition format, parsed with the `prometheus-parse` crate, read into
/// [`LoadSignals`](crate::health::LoadSignals) by a [`MetricNames`] preset. `ready` and
/// `resident_models` stay `None`: metrics say neither.
///
/// Where it asks: the target's
/// [`metrics_address`](ProbeTarget::metrics_address) when it has one
/// (MLServer serves metrics on a port of its own, 8082 by default, set per
/// backend with [`BackendMeta::with_metrics_address`](crate::backend::BackendMeta::with_metrics_address)); else the target's
/// host on [`on_port`](Self::on_port)'s port (Triton's is 8002); else the
/// target's own address.
///
/// A server with no metrics there (404) has **no metrics**, not a failed
/// probe: the report is empty (every signal `None`), as when the metrics
/// lack the names asked for.
///
/// # Errors
///
/// [`ProbeError::Transport`] when the request cannot be sent or its
/// response not read; [`ProbeError::Status`] for an answer other than 2xx
/// or 404;
/// [`ProbeError::Malformed`] when the body is not UTF-8, exceeds 4 MiB, is
/// cut short (the format ends every line, the last too, with a line feed),
/// holds a line that is neither a comment nor a sample with a number, or
/// when a metric read has a NaN, infinite or negative value — or, for the
/// KV-cache usage, one above 1. Metrics that are absent are not an error
/// (the signal is `None`). The prober applies no timeout: the caller (the
/// probe runner) does.
#[derive(Debug, Clone)]
pub struct PrometheusMetrics {
    client: ProbeClient,
    names: Arc<MetricNames>,
    port: Option<u16>,
}

impl PrometheusMetrics {
    /// A prober reading `names`, sending through `client` (clones share its
    /// connection pool; [`ProbeClient::new`] for `http://` origins, for
    /// `https://` one [from a TLS client](ProbeClient::from_client)).
    pub fn new(client: ProbeClient, names: MetricNames) -> Self {
        Self {
            client,
            names: Arc::new(names),
            port: None,
        }
    }

    /// Asks for the metrics on `port` of the target's host instead of the
    /// target's own port (default: the target's port). Triton's is 8002.
    pub fn on_port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }
}

/// `origin` with its port replaced by `port`.
fn with_port(origin: &Origin, port: u16) -> Result<Origin, ProbeError> {
    let host = origin.authority().host();
    // IPv6 hosts keep their brackets in `host()`; add them if missing.
    let host = if host.contains(':') && !host.starts_with('[') {
        Cow::Owned(format!("[{host}]"))
    } else {
        Cow::Borrowed(host)
    };
    Origin::parse(&format!("{}://{host}:{port}", origin.scheme()))
        .map_err(|e| ProbeError::Transport(Box::new(e)))
}

impl Prober for PrometheusMetrics {
    fn probe(
        &self,
        target: &ProbeTarget,
    ) -> impl Future<Output = Result<ProbeReport, ProbeError>> + Send + 'static {
        let client = self.client.clone();
        let names = self.names.clone();
        let origin = match (&target.metrics_address, self.port) {
            (Some(origin), _) => Ok(origin.clone()),
            (None, Some(port)) => with_port(&target.address, port),
            (None, None) => Ok(target.address.clone()),
        };
        async move {
            let answer =
                fetch::send(&client, &origin?, METRICS_PATH, None, MAX_METRICS_BODY).await?;
            if answer.status == http::StatusCode::NOT_FOUND {
                return Ok(ProbeReport::default());
            }
            let body = answer.success()?;
            Ok(ProbeReport {
                load: parse_metrics(&body, &names)?,
                ..ProbeReport::default()
            })
        }
    }
}

mod names;
mod parse;

pub use self::names::MetricNames;
#[cfg(test)]
mod tests;
