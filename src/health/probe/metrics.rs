//! Prometheus metrics (`GET /metrics`) read into load signals.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;

use prometheus_parse::{LineInfo, Scrape, Value};

use super::fetch::{self, ProbeClient};
use super::{ProbeError, ProbeReport, ProbeTarget, Prober};
use crate::endpoint::Origin;
use crate::health::LoadSignals;

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

    /// Sets the candidates for [`LoadSignals::kv_cache_usage`], a fraction
    /// in [0, 1], averaged over series.
    pub fn kv_cache_usage<I: IntoIterator<Item = S>, S: Into<String>>(mut self, n: I) -> Self {
        self.kv_cache_usage = names(n);
        self
    }

    /// Sets the candidates for [`LoadSignals::requests_running`], a count
    /// summed over series.
    pub fn requests_running<I: IntoIterator<Item = S>, S: Into<String>>(mut self, n: I) -> Self {
        self.requests_running = names(n);
        self
    }

    /// Sets the candidates for [`LoadSignals::requests_waiting`], a count
    /// summed over series.
    pub fn requests_waiting<I: IntoIterator<Item = S>, S: Into<String>>(mut self, n: I) -> Self {
        self.requests_waiting = names(n);
        self
    }

    /// Sets the candidates for [`LoadSignals::gpu_memory_used_bytes`], in
    /// bytes, summed over series.
    pub fn gpu_memory_used_bytes<I: IntoIterator<Item = S>, S: Into<String>>(
        mut self,
        n: I,
    ) -> Self {
        self.gpu_memory_used_bytes = names(n);
        self
    }

    /// Sets the candidates for [`LoadSignals::gpu_memory_total_bytes`], in
    /// bytes, summed over series.
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
/// [`LoadSignals`] by a [`MetricNames`] preset. `ready` and
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

    /// The metric names read.
    pub fn names(&self) -> &MetricNames {
        &self.names
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

// === parsing ===

/// Stands in for `:` in metric names. prometheus-parse 0.2.5 matches names
/// with `\w+`, which has no `:`, so it skips every sample of a name such as
/// `vllm:num_requests_running`. Valid metric names are ASCII, so this
/// non-ASCII letter (U+02D0, a word character) stands for `:` without
/// clashing with any name.
const COLON: &str = "\u{2d0}";

fn escape_name(name: &str) -> String {
    name.replace(':', COLON)
}

/// `line` with the colons of its metric name escaped; labels and values
/// are left alone.
fn escape_line(line: &str) -> Cow<'_, str> {
    if !line.contains(':') {
        return Cow::Borrowed(line);
    }
    let trimmed = line.trim_start();
    // `# HELP name doc` and `# TYPE name type`; other comments as they are.
    let (head, rest) = match trimmed.strip_prefix('#') {
        Some(comment) => {
            let body = comment.trim_start();
            let Some(after) = body
                .strip_prefix("HELP")
                .or_else(|| body.strip_prefix("TYPE"))
            else {
                return Cow::Borrowed(line);
            };
            if !after.starts_with(char::is_whitespace) {
                return Cow::Borrowed(line);
            }
            let keyword = &body[..4];
            (format!("# {keyword} "), after.trim_start())
        }
        None => (String::new(), trimmed),
    };
    let end = rest
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(rest.len());
    Cow::Owned(format!(
        "{head}{}{}",
        escape_name(&rest[..end]),
        &rest[end..]
    ))
}

/// The metric a line is about: a sample's name, or the name a `# HELP` or
/// `# TYPE` comment documents; `None` for other comments, blank lines and
/// lines that start with no valid metric name.
fn metric_name(line: &str) -> Option<&str> {
    let line = line.trim_start();
    let rest = match line.strip_prefix('#') {
        Some(comment) => {
            let body = comment.trim_start();
            let after = body
                .strip_prefix("HELP")
                .or_else(|| body.strip_prefix("TYPE"))?;
            if !after.starts_with(char::is_whitespace) {
                return None;
            }
            after.trim_start()
        }
        None => line,
    };
    let end = rest
        .find(|c: char| c == '{' || c.is_whitespace())
        .unwrap_or(rest.len());
    let name = &rest[..end];
    let valid = name.chars().enumerate().all(|(i, c)| {
        c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
    });
    (!name.is_empty() && valid).then_some(name)
}

/// A sample line without its label block (`name{…} value` is `name
/// value`), quotes and escapes inside label values respected; other lines
/// as they are. An unclosed block is left for the parser to refuse.
fn without_labels(line: &str) -> Cow<'_, str> {
    let trimmed = line.trim_start();
    if trimmed.starts_with('#') {
        return Cow::Borrowed(line);
    }
    let Some(open) = trimmed.find('{') else {
        return Cow::Borrowed(line);
    };
    let (mut quoted, mut escaped) = (false, false);
    for (i, c) in trimmed[open..].char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => {
                let rest = &trimmed[open + i + 1..];
                return Cow::Owned(format!("{}{rest}", &trimmed[..open]));
            }
            _ => {}
        }
    }
    Cow::Borrowed(line)
}

/// Whether `name` is one of `wanted`, or the series of a histogram or
/// summary of one (`_bucket`, `_sum`, `_count`): those are parsed, so that
/// a histogram where a gauge is expected is found out.
fn asked(wanted: &[&str], name: &str) -> bool {
    let base = ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix));
    wanted.contains(&name) || base.is_some_and(|base| wanted.contains(&base))
}

/// Whether a sample line not read ends as a sample does: a value, and
/// maybe a timestamp, after its name and labels.
fn sample_shaped(line: &str) -> bool {
    let mut tokens = line.split_whitespace().rev();
    // A timestamp after the value is a number too.
    let (last, before) = (tokens.next(), tokens.next());
    last.is_some_and(is_number) && before.is_some()
}

fn is_number(value: &str) -> bool {
    value.eq_ignore_ascii_case("nan") || value.parse::<f64>().is_ok()
}

/// Reads `names`' signals from a Prometheus text exposition.
fn parse_metrics(body: &[u8], names: &MetricNames) -> Result<LoadSignals, ProbeError> {
    let malformed = |what: String| ProbeError::malformed(format!("{METRICS_PATH}: {what}"));
    let text = std::str::from_utf8(body).map_err(|_| malformed("not UTF-8".into()))?;
    if !text.is_empty() && !text.ends_with('\n') {
        return Err(malformed(
            "cut short: the last line has no line feed".into(),
        ));
    }
    let wanted = names.all();
    let mut lines = Vec::new();
    for (number, line) in text.lines().enumerate() {
        // Only the metrics asked for are parsed; the others are checked
        // for their shape only (prometheus-parse 0.2.5 rejects label values
        // holding `{` or `}`, as MLServer's `path="/v2/models/{model_name}"`
        // does).
        let valid = match metric_name(line) {
            Some(name) if asked(&wanted, name) => {
                // The series are summed (or averaged) whatever their
                // labels: a gauge's labels are dropped before parsing, so
                // that none can trip the parser.
                let line = match wanted.contains(&name) {
                    true => without_labels(line),
                    false => Cow::Borrowed(line),
                };
                let line = escape_line(&line);
                let valid = match LineInfo::parse(&line) {
                    LineInfo::Sample { value, .. } => is_number(value),
                    LineInfo::Ignored => line.trim_start().starts_with('#'),
                    LineInfo::Doc { .. } | LineInfo::Type { .. } | LineInfo::Empty => true,
                };
                lines.push(Ok(line.into_owned()));
                valid
            }
            Some(_) => line.trim_start().starts_with('#') || sample_shaped(line),
            None => {
                let line = line.trim_start();
                line.is_empty() || line.starts_with('#')
            }
        };
        if !valid {
            return Err(malformed(format!(
                "line {} is neither a comment nor a sample",
                number + 1
            )));
        }
    }
    let scrape = Scrape::parse(lines.into_iter()).map_err(|e| malformed(e.to_string()))?;
    let read = |candidates: &[String], fraction: bool| -> Result<Option<f64>, ProbeError> {
        for name in candidates {
            let escaped = escape_name(name);
            let mut values = Vec::new();
            for sample in scrape.samples.iter().filter(|s| s.metric == escaped) {
                let value = match sample.value {
                    Value::Gauge(v) | Value::Counter(v) | Value::Untyped(v) => v,
                    Value::Histogram(_) | Value::Summary(_) => {
                        return Err(malformed(format!("{name} is not a gauge")));
                    }
                };
                let max = if fraction { 1.0 } else { f64::MAX };
                if !(0.0..=max).contains(&value) {
                    let range = if fraction { "[0, 1]" } else { "[0, ∞)" };
                    return Err(malformed(format!("{name} is {value}, not in {range}")));
                }
                values.push(value);
            }
            if !values.is_empty() {
                let sum: f64 = values.iter().sum();
                return Ok(Some(if fraction {
                    sum / values.len() as f64
                } else {
                    sum
                }));
            }
        }
        Ok(None)
    };
    Ok(LoadSignals {
        kv_cache_usage: read(&names.kv_cache_usage, true)?,
        requests_running: read(&names.requests_running, false)?,
        requests_waiting: read(&names.requests_waiting, false)?,
        gpu_memory_used_bytes: read(&names.gpu_memory_used_bytes, false)?,
        gpu_memory_total_bytes: read(&names.gpu_memory_total_bytes, false)?,
    })
}

#[cfg(test)]
mod tests;
