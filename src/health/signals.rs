//! What a model server reports of its load: the inputs of the health
//! score's capacity term.

use super::config::HealthConfig;

/// Load signals one probe read from a model server (every field optional:
/// servers expose different ones). A value out of its range (NaN, negative,
/// a KV-cache usage over 1) is not read: the signal counts as absent. The health score's capacity term uses
/// KV-cache usage and queue depth where the server reports them (LLM
/// servers such as vLLM, which preallocate most GPU memory so that free
/// memory says nothing), else free GPU memory (multi-model servers such as
/// Triton, where it is room to load another model).
///
/// Build one from `LoadSignals::default()` and set the fields read.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct LoadSignals {
    /// Share of the KV cache in use, a fraction in [0, 1] (vLLM's
    /// `vllm:kv_cache_usage_perc`, which despite its name is a fraction).
    pub kv_cache_usage: Option<f64>,
    /// Requests being served now (vLLM's `vllm:num_requests_running`).
    pub requests_running: Option<f64>,
    /// Requests queued, waiting to be served: the queue depth (vLLM's
    /// `vllm:num_requests_waiting`).
    pub requests_waiting: Option<f64>,
    /// GPU memory in use, in bytes, summed over the server's GPUs
    /// (Triton's `nv_gpu_memory_used_bytes`).
    pub gpu_memory_used_bytes: Option<f64>,
    /// GPU memory in total, in bytes, summed over the server's GPUs
    /// (Triton's `nv_gpu_memory_total_bytes`).
    pub gpu_memory_total_bytes: Option<f64>,
}

impl LoadSignals {
    /// Whether no signal is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Each field from `self` where set, else from `other`.
    pub(crate) fn or(self, other: Self) -> Self {
        Self {
            kv_cache_usage: self.kv_cache_usage.or(other.kv_cache_usage),
            requests_running: self.requests_running.or(other.requests_running),
            requests_waiting: self.requests_waiting.or(other.requests_waiting),
            gpu_memory_used_bytes: self.gpu_memory_used_bytes.or(other.gpu_memory_used_bytes),
            gpu_memory_total_bytes: self.gpu_memory_total_bytes.or(other.gpu_memory_total_bytes),
        }
    }
}

/// The capacity term from load signals, if they say anything.
pub(super) fn capacity(
    p: &HealthConfig,
    load: &LoadSignals,
    gpu_memory: Option<u64>,
) -> Option<f64> {
    let finite = |x: Option<f64>| x.filter(|v| v.is_finite() && *v >= 0.0);
    // A usage over 1 is a percentage by mistake, not a full cache: unread.
    let kv = finite(load.kv_cache_usage)
        .filter(|u| *u <= 1.0)
        .map(|u| 1.0 - u);
    let queue = finite(load.requests_waiting).map(|w| 1.0 / (1.0 + w / p.queue_scale));
    let llm = match (kv, queue) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    llm.or_else(|| {
        let used = finite(load.gpu_memory_used_bytes)?;
        let total = finite(load.gpu_memory_total_bytes)
            .or(gpu_memory.map(|b| b as f64))
            .filter(|t| *t > 0.0)?;
        Some((1.0 - used / total).clamp(0.0, 1.0))
    })
}
