//! [`MetricNames`]: which Prometheus metrics hold each load signal, per
//! kind of server, and the path they are read from.

/// The metrics path.
pub(super) const METRICS_PATH: &str = "/metrics";

/// Which Prometheus metrics hold each load signal, per kind of server.
///
/// Each signal has a list of candidate metric names (a field, named as the
/// [`LoadSignals`](crate::health::LoadSignals) field it fills; `default()`
/// has none): the first that the
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
/// let mut names = MetricNames::vllm();
/// names.requests_waiting = vec!["myllm:queue_depth".into()];
/// # let _ = names;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MetricNames {
    /// Candidates for
    /// [`LoadSignals::kv_cache_usage`](crate::health::LoadSignals::kv_cache_usage),
    /// a fraction in [0, 1], averaged over series.
    pub kv_cache_usage: Vec<String>,
    /// Candidates for
    /// [`LoadSignals::requests_running`](crate::health::LoadSignals::requests_running),
    /// a count summed over series.
    pub requests_running: Vec<String>,
    /// Candidates for
    /// [`LoadSignals::requests_waiting`](crate::health::LoadSignals::requests_waiting),
    /// a count summed over series.
    pub requests_waiting: Vec<String>,
    /// Candidates for
    /// [`LoadSignals::gpu_memory_used_bytes`](crate::health::LoadSignals::gpu_memory_used_bytes),
    /// in bytes, summed over series.
    pub gpu_memory_used_bytes: Vec<String>,
    /// Candidates for
    /// [`LoadSignals::gpu_memory_total_bytes`](crate::health::LoadSignals::gpu_memory_total_bytes),
    /// in bytes, summed over series.
    pub gpu_memory_total_bytes: Vec<String>,
}

fn names(names: &[&str]) -> Vec<String> {
    names.iter().map(|&n| n.to_owned()).collect()
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

    /// vLLM's: KV-cache usage from `vllm:kv_cache_usage_perc`, else the
    /// older `vllm:gpu_cache_usage_perc` (both a fraction in [0, 1] despite
    /// the name); `vllm:num_requests_running`; `vllm:num_requests_waiting`.
    /// No GPU memory: vLLM preallocates most of it, so it says nothing.
    pub fn vllm() -> Self {
        Self {
            kv_cache_usage: names(&["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"]),
            requests_running: names(&["vllm:num_requests_running"]),
            requests_waiting: names(&["vllm:num_requests_waiting"]),
            ..Self::default()
        }
    }

    /// Triton's: `nv_gpu_memory_used_bytes` and `nv_gpu_memory_total_bytes`,
    /// one series per GPU (label `gpu_uuid`), summed over the GPUs.
    pub fn triton() -> Self {
        Self {
            gpu_memory_used_bytes: names(&["nv_gpu_memory_used_bytes"]),
            gpu_memory_total_bytes: names(&["nv_gpu_memory_total_bytes"]),
            ..Self::default()
        }
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
