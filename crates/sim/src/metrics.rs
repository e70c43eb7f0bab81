//! The simulated server's Prometheus metrics, in vLLM's and Triton's
//! names (see [`protocol`](super::protocol)).

use std::fmt::Write as _;

/// What the metrics show, read from the server at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Snapshot {
    /// Requests holding a serving slot.
    pub(crate) running: u64,
    /// Requests waiting for a slot, phantom backlog included.
    pub(crate) waiting: u64,
    /// Requests served at once.
    pub(crate) concurrency: u64,
    /// Resident models (loaded or loading).
    pub(crate) resident: u64,
    /// Resident model slots.
    pub(crate) slots: u64,
    /// GPU memory of one model, in bytes.
    pub(crate) model_memory: u64,
    /// Prompt tokens prefilled (prefix cache on).
    pub(crate) prefix_queries: u64,
    /// Of those, found in the prefix cache.
    pub(crate) prefix_hits: u64,
}

/// A GPU UUID in NVIDIA's form, derived from the server's name.
pub(crate) fn gpu_uuid(name: &str) -> String {
    let a = xxhash_rust::xxh3::xxh3_64_with_seed(name.as_bytes(), 0);
    let b = xxhash_rust::xxh3::xxh3_64_with_seed(name.as_bytes(), 1);
    format!(
        "GPU-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

fn gauge(out: &mut String, name: &str, help: &str, labels: &str, value: impl std::fmt::Display) {
    // Writing to a String does not fail.
    let _ = write!(
        out,
        "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{{labels}}} {value}\n"
    );
}

fn counter(out: &mut String, name: &str, help: &str, labels: &str, value: u64) {
    let _ = write!(
        out,
        "# HELP {name} {help}\n# TYPE {name} counter\n{name}{{{labels}}} {value}\n"
    );
}

/// The text exposition of `s` for the GPU `uuid`.
pub(crate) fn render(s: &Snapshot, uuid: &str) -> String {
    let mut out = String::with_capacity(1024);
    let engine = r#"engine="0""#;
    gauge(
        &mut out,
        "vllm:num_requests_running",
        "Requests holding a serving slot (loading their model or being served).",
        engine,
        s.running,
    );
    gauge(
        &mut out,
        "vllm:num_requests_waiting",
        "Requests waiting for a serving slot.",
        engine,
        s.waiting,
    );
    let usage = s.running.min(s.concurrency) as f64 / s.concurrency.max(1) as f64;
    gauge(
        &mut out,
        "vllm:kv_cache_usage_perc",
        "KV-cache usage (requests running / max concurrent). 1 means 100 percent usage.",
        engine,
        usage,
    );
    counter(
        &mut out,
        "vllm:prefix_cache_queries_total",
        "Prefix cache queries, in terms of number of queried tokens.",
        engine,
        s.prefix_queries,
    );
    counter(
        &mut out,
        "vllm:prefix_cache_hits_total",
        "Prefix cache hits, in terms of number of cached tokens.",
        engine,
        s.prefix_hits,
    );
    let gpu = format!(r#"gpu_uuid="{uuid}""#);
    gauge(
        &mut out,
        "nv_gpu_memory_total_bytes",
        "GPU total memory, in bytes",
        &gpu,
        s.slots.saturating_mul(s.model_memory),
    );
    gauge(
        &mut out,
        "nv_gpu_memory_used_bytes",
        "GPU used memory, in bytes",
        &gpu,
        s.resident.saturating_mul(s.model_memory),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_both_kinds_of_names() {
        let s = Snapshot {
            running: 1,
            waiting: 7,
            concurrency: 4,
            resident: 2,
            slots: 5,
            model_memory: 10,
            prefix_queries: 300,
            prefix_hits: 128,
        };
        let uuid = gpu_uuid("node-0");
        assert_eq!(uuid.len(), "GPU-2e1a5bd4-2f2a-9d5e-8a6c-1c1f0b3f6a01".len());
        let text = render(&s, &uuid);
        assert!(text.ends_with('\n'));
        for line in [
            "# TYPE vllm:num_requests_waiting gauge",
            "vllm:num_requests_running{engine=\"0\"} 1",
            "vllm:num_requests_waiting{engine=\"0\"} 7",
            "vllm:kv_cache_usage_perc{engine=\"0\"} 0.25",
            "# TYPE vllm:prefix_cache_hits_total counter",
            "vllm:prefix_cache_queries_total{engine=\"0\"} 300",
            "vllm:prefix_cache_hits_total{engine=\"0\"} 128",
            &format!("nv_gpu_memory_used_bytes{{gpu_uuid=\"{uuid}\"}} 20"),
            &format!("nv_gpu_memory_total_bytes{{gpu_uuid=\"{uuid}\"}} 50"),
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }
}
