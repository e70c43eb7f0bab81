//! Prometheus metrics (`GET /metrics`) read into load signals.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;

use self::parse::parse_metrics;
use super::fetch::{self, ProbeClient};
use super::{ProbeError, ProbeReport, ProbeTarget, Prober};
use crate::endpoint::Origin;

/// The metrics path.
const METRICS_PATH: &str = "/metrics";
/// Largest metrics body: 4 MiB (histograms per model add up).
const MAX_METRICS_BODY: usize = 4 << 20;

/// Which Prometheus metrics hold each load signal, per kind of server.
///
/// Each signal has a list of candidate metric names: the first that the
/// server exposes (with at least one sample) is read, the rest ignored — so
/// one preset covers a metric renamed across server versions. A signal
/// with no candidate present stays `None`. A metric exposed as several
/// series (labels such as vLLM's `model_name` and `engine`, or Triton's
/// `gpu_uuid`) is summed, except the KV-cache usage, which is averaged:
/// each engine holds a cache of its own and the server spreads requests
/// over them, so the mean is the share of the server's cache in use.
///
/// ```
/// use tower_model_balance::health::probe::MetricNames;
///
/// // A vLLM fork that renamed its queue gauge.
/// let names = MetricNames::vllm().requests_waiting(["myllm:queue_depth"]);
/// # let _ = names;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MetricNames {
    kv_cache_usage: Vec<String>,
    requests_running: Vec<String>,
    requests_waiting: Vec<String>,
    gpu_memory_used_bytes: Vec<String>,
    gpu_memory_total_bytes: Vec<String>,
}

fn names<I, S>(names: I) -> Vec<String>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    names.into_iter().map(Into::into).collect()
}

impl MetricNames {
    /// Every name asked for, of every signal.
    fn all(&self) -> Vec<&str> {
        [
            &self.kv_cache_usage,
            &self.requests_running,
            &self.requests_waiting,
            &self.gpu_memory_used_bytes,
            &self.gpu_memory_total_bytes,
        ]
        .into_iter()
        .flatten()
        .map(String::as_str)
        .collect()
    }

    /// No metric for any signal: a start for [the setters](Self::kv_cache_usage).
    pub fn none() -> Self {
        Self {
            kv_cache_usage: Vec::new(),
            requests_running: Vec::new(),
            requests_waiting: Vec::new(),
            gpu_memory_used_bytes: Vec::new(),
            gpu_memory_total_bytes: Vec::new(),
        }
    }

    /// vLLM's: KV-cache usage from `vllm:kv_cache_usage_perc`, else the
    /// older `vllm:gpu_cache_usage_perc` (both a fraction in [0, 1] despite
    /// the name); `vllm:num_requests_running`; `vllm:num_requests_waiting`.
    /// No GPU memory: vLLM preallocates most of it, so it says nothing.
    pub fn vllm() -> Self {
        Self::none()
            .kv_cache_usage(["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"])
            .requests_running(["vllm:num_requests_running"])
            .requests_waiting(["vllm:num_requests_waiting"])
    }

    /// Triton's: `nv_gpu_memory_used_bytes` and `nv_gpu_memory_total_bytes`,
    /// one series per GPU (label `gpu_uuid`), summed over the GPUs.
    pub fn triton() -> Self {
        Self::none()
            .gpu_memory_used_bytes(["nv_gpu_memory_used_bytes"])
            .gpu_memory_total_bytes(["nv_gpu_memory_total_bytes"])
    }

    /// Sets the candidates for
    /// [`LoadSignals::kv_cache_usage`](crate::health::LoadSignals::kv_cache_usage),
    /// a fraction in [0, 1], averaged over series.
    pub fn kv_cache_usage<I: IntoIterator<Item = S>, S: Into<String>>(mut self, n: I) -> Self {
        self.kv_cache_usage = names(n);
        self
    }

    /// Sets the candidates for
    /// [`LoadSignals::requests_running`](crate::health::LoadSignals::requests_running),
    /// a count summed over series.
    pub fn requests_running<I: IntoIterator<Item = S>, S: Into<String>>(mut self, n: I) -> Self {
        self.requests_running = names(n);
        self
    }

    /// Sets the candidates for
    /// [`LoadSignals::requests_waiting`](crate::health::LoadSignals::requests_waiting),
    /// a count summed over series.
    pub fn requests_waiting<I: IntoIterator<Item = S>, S: Into<String>>(mut self, n: I) -> Self {
        self.requests_waiting = names(n);
        self
    }

    /// Sets the candidates for
    /// [`LoadSignals::gpu_memory_used_bytes`](crate::health::LoadSignals::gpu_memory_used_bytes),
    /// in bytes, summed over series.
    pub fn gpu_memory_used_bytes<I: IntoIterator<Item = S>, S: Into<String>>(
        mut self,
        n: I,
    ) -> Self {
        self.gpu_memory_used_bytes = names(n);
        self
    }

    /// Sets the candidates for
    /// [`LoadSignals::gpu_memory_total_bytes`](crate::health::LoadSignals::gpu_memory_total_bytes),
    /// in bytes, summed over series.
    pub fn gpu_memory_total_bytes<I: IntoIterator<Item = S>, S: Into<String>>(
        mut self,
        n: I,
    ) -> Self {
        self.gpu_memory_total_bytes = names(n);
        self
    }

    /// Both sets of candidates: each signal's candidates from `self`, then
    /// those from `other` (e.g. `MetricNames::vllm().and(MetricNames::triton())`).
    pub fn and(mut self, other: Self) -> Self {
        self.kv_cache_usage.extend(other.kv_cache_usage);
        self.requests_running.extend(other.requests_running);
        self.requests_waiting.extend(other.requests_waiting);
        self.gpu_memory_used_bytes
            .extend(other.gpu_memory_used_bytes);
        self.gpu_memory_total_bytes
            .extend(other.gpu_memory_total_bytes);
        self
    }
}

/// Probes a server's Prometheus metrics: `GET /metrics` in the text
/// exposition format, parsed with the `prometheus-parse` crate, read into
/// [`LoadSignals`](crate::health::LoadSignals) by a [`MetricNames`] preset. `ready` and
/// `resident_models` stay `None`: metrics say neither.
///
/// Where it asks: the target's
/// [`metrics_address`](ProbeTarget::metrics_address) when it has one
/// (MLServer serves metrics on a port of its own, 8082 by default, set per
/// backend with [`BackendMeta::with_metrics_address`](crate::balance::BackendMeta::with_metrics_address)); else the target's
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
    /// A prober reading `names`, with its own HTTP client.
    pub fn new(names: MetricNames) -> Self {
        Self::with_client(fetch::client(), names)
    }

    /// A prober reading `names`, sending through `client` (clones share its
    /// connection pool).
    pub fn with_client(client: ProbeClient, names: MetricNames) -> Self {
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

mod parse;
#[cfg(test)]
mod tests;
