use prometheus_parse::LineInfo;

use super::parse::escape_line;
use super::*;
use crate::health::LoadSignals;

/// Shaped like vLLM V1's exposition: two engines (data parallel), HELP and
/// TYPE lines, a counter and a histogram around the gauges read.
const VLLM: &str = r#"# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
vllm:num_requests_running{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0
vllm:num_requests_waiting{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.75
vllm:kv_cache_usage_perc{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.25
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 12345.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 40.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 40.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.5
"#;

/// Shaped like an older vLLM (V0): one series each, the KV cache under its
/// old name.
const VLLM_V0: &str = r#"# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="mistral-7b"} 0.5
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="mistral-7b"} 4.0
"#;

/// Shaped like Triton's exposition on a node with two GPUs.
const TRITON: &str = r#"# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="densenet_onnx",version="1"} 25
# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{gpu_uuid="GPU-2e1a5bd4-2f2a-9d5e-8a6c-1c1f0b3f6a01"} 0.41
nv_gpu_utilization{gpu_uuid="GPU-7c0d4e55-93a1-4b7e-b1f2-0f9e8d7c6b02"} 0.13
# HELP nv_gpu_memory_total_bytes GPU total memory, in bytes
# TYPE nv_gpu_memory_total_bytes gauge
nv_gpu_memory_total_bytes{gpu_uuid="GPU-2e1a5bd4-2f2a-9d5e-8a6c-1c1f0b3f6a01"} 17179869184
nv_gpu_memory_total_bytes{gpu_uuid="GPU-7c0d4e55-93a1-4b7e-b1f2-0f9e8d7c6b02"} 17179869184
# HELP nv_gpu_memory_used_bytes GPU used memory, in bytes
# TYPE nv_gpu_memory_used_bytes gauge
nv_gpu_memory_used_bytes{gpu_uuid="GPU-2e1a5bd4-2f2a-9d5e-8a6c-1c1f0b3f6a01"} 4294967296
nv_gpu_memory_used_bytes{gpu_uuid="GPU-7c0d4e55-93a1-4b7e-b1f2-0f9e8d7c6b02"} 1073741824
"#;

fn malformed(result: Result<LoadSignals, ProbeError>) -> String {
    match result {
        Err(ProbeError::Malformed { what }) => what,
        other => panic!("expected Malformed, got {other:?}"),
    }
}

#[test]
fn the_crate_alone_skips_names_with_colons() {
    // Why names are escaped: if this starts to fail, prometheus-parse
    // learned colons and the escape is harmless but no longer needed.
    assert_eq!(
        LineInfo::parse("vllm:num_requests_running 1.0"),
        LineInfo::Ignored
    );
    assert!(matches!(
        LineInfo::parse(&escape_line("vllm:num_requests_running{a=\"x:y\"} 1.0")),
        LineInfo::Sample {
            labels: Some("a=\"x:y\""),
            value: "1.0",
            ..
        }
    ));
}

#[test]
fn vllm_gauges_sum_and_average_over_engines() {
    let load = parse_metrics(VLLM.as_bytes(), &MetricNames::vllm()).unwrap();
    assert_eq!(load.requests_running, Some(5.0));
    assert_eq!(load.requests_waiting, Some(7.0));
    assert_eq!(load.kv_cache_usage, Some(0.5));
    assert_eq!(load.gpu_memory_used_bytes, None);
    assert_eq!(load.gpu_memory_total_bytes, None);
}

#[test]
fn vllm_falls_back_to_the_old_kv_cache_name() {
    let load = parse_metrics(VLLM_V0.as_bytes(), &MetricNames::vllm()).unwrap();
    assert_eq!(load.kv_cache_usage, Some(0.5));
    assert_eq!(load.requests_running, Some(4.0));
    assert_eq!(load.requests_waiting, None, "absent is None, not an error");
}

#[test]
fn triton_gpu_memory_sums_over_gpus() {
    let load = parse_metrics(TRITON.as_bytes(), &MetricNames::triton()).unwrap();
    assert_eq!(load.gpu_memory_used_bytes, Some(5.0 * (1u64 << 30) as f64));
    assert_eq!(
        load.gpu_memory_total_bytes,
        Some(32.0 * (1u64 << 30) as f64)
    );
    assert_eq!(load.kv_cache_usage, None);
    // The vLLM preset finds nothing in Triton's metrics, and that is fine.
    assert!(parse_metrics(TRITON.as_bytes(), &MetricNames::vllm())
        .unwrap()
        .is_empty());
    let both = MetricNames::vllm().and(MetricNames::triton());
    let text = format!("{VLLM}{TRITON}");
    let load = parse_metrics(text.as_bytes(), &both).unwrap();
    assert_eq!(load.requests_waiting, Some(7.0));
    assert_eq!(
        load.gpu_memory_total_bytes,
        Some(32.0 * (1u64 << 30) as f64)
    );
}

#[test]
fn empty_and_comment_only_bodies_have_no_signals() {
    assert!(parse_metrics(b"", &MetricNames::vllm()).unwrap().is_empty());
    assert!(parse_metrics(b"# a comment\n\n", &MetricNames::vllm())
        .unwrap()
        .is_empty());
}

#[test]
fn malformed_metrics() {
    let vllm = MetricNames::vllm();
    // Cut short mid-line: the last line has no line feed.
    let cut = &VLLM[..VLLM.find("} 7.0").unwrap() + 3];
    assert!(malformed(parse_metrics(cut.as_bytes(), &vllm)).contains("cut short"));
    // Cut short inside the labels, then a line feed: not a sample.
    let cut = format!("{}\n", &VLLM[..VLLM.find("engine=\"1\"").unwrap()]);
    assert!(malformed(parse_metrics(cut.as_bytes(), &vllm)).contains("line 4"));
    for (body, expect) in [
        ("<html>not metrics</html>\n", "line 1"),
        ("vllm:num_requests_waiting{engine=\"0\"} many\n", "line 1"),
        ("vllm:kv_cache_usage_perc 1.5\n", "not in [0, 1]"),
        ("vllm:kv_cache_usage_perc NaN\n", "not in [0, 1]"),
        ("vllm:num_requests_running -1\n", "not in [0, ∞)"),
        ("vllm:num_requests_waiting +Inf\n", "not in [0, ∞)"),
    ] {
        let what = malformed(parse_metrics(body.as_bytes(), &vllm));
        assert!(
            what.starts_with(METRICS_PATH) && what.contains(expect),
            "{body}: {what}"
        );
    }
    assert!(malformed(parse_metrics(b"\xff\xfe\n", &vllm)).contains("UTF-8"));
    // A histogram where a gauge is expected.
    let names = MetricNames {
        requests_waiting: vec!["vllm:time_to_first_token_seconds".into()],
        ..MetricNames::default()
    };
    assert!(malformed(parse_metrics(VLLM.as_bytes(), &names)).contains("not a gauge"));
    // Bad values of metrics not read are no concern.
    let other = "# TYPE other gauge\nother -3\n";
    assert!(parse_metrics(other.as_bytes(), &vllm).unwrap().is_empty());
}

#[test]
fn label_values_with_braces_are_read_past() {
    // MLServer's own metrics (its metrics port), as 1.7.1 serves them:
    // route templates in label values, which prometheus-parse 0.2.5
    // cannot parse; they are not read, only checked for their shape.
    let mlserver = concat!(
        "# HELP rest_server_requests_total Total number of requests\n",
        "# TYPE rest_server_requests_total counter\n",
        "rest_server_requests_total{app_name=\"mlserver\",method=\"POST\",path=\"/v2/repository/models/{model_name}/load\",status_code=\"200\"} 4.0\n",
        "model_infer_request_success_total{model=\"m0\",version=\"None\"} 1.0\n",
        "vllm:num_requests_running{path=\"/v2/models/{name}\"} 3.0\n",
        "vllm:num_requests_waiting 2 1700000000000\n",
    );
    let signals = parse_metrics(mlserver.as_bytes(), &MetricNames::vllm()).unwrap();
    assert_eq!(signals.requests_waiting, Some(2.0));
    assert_eq!(signals.requests_running, Some(3.0), "read past its labels");
    // A line of another metric that is no sample is still refused.
    let broken = "rest_server_requests_total{path=\"/a/{b}\"}\n";
    assert!(malformed(parse_metrics(broken.as_bytes(), &MetricNames::vllm())).contains("line 1"));
}

#[test]
fn a_port_of_its_own() {
    let origin = Origin::parse("http://10.0.0.7:8000").unwrap();
    assert_eq!(
        with_port(&origin, 8002).unwrap().to_string(),
        "http://10.0.0.7:8002"
    );
    let origin = Origin::parse("http://[::1]:8000").unwrap();
    assert_eq!(
        with_port(&origin, 8002).unwrap().to_string(),
        "http://[::1]:8002"
    );
    let origin = Origin::parse("https://triton.internal").unwrap();
    assert_eq!(
        with_port(&origin, 8002).unwrap().to_string(),
        "https://triton.internal:8002"
    );
}
