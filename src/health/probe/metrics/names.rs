//! [`MetricNames`]: which Prometheus metrics hold each load signal, per
//! kind of server, and the path they are read from.

/// The metrics path.
pub(super) const METRICS_PATH: &str = "/metrics";

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
    pub(super) kv_cache_usage: Vec<String>,
    pub(super) requests_running: Vec<String>,
    pub(super) requests_waiting: Vec<String>,
    pub(super) gpu_memory_used_bytes: Vec<String>,
    pub(super) gpu_memory_total_bytes: Vec<String>,
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
    pub(super) fn all(&self) -> Vec<&str> {
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
