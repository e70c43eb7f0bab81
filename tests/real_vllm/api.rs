//! The OpenAI API through the gateway against the same call made to a
//! vLLM server directly: what a user's client sees must not change.

use std::time::Duration;

use tokio::time::Instant;

use crate::fixture::{Vllm, MODEL};
use crate::gateway::{chat, get, median, open_stream, post, Running};

/// The official `openai` client's calls (models, chat, completions, a
/// streamed chat with its usage chunk), direct and through the gateway:
/// the same answers (greedy decoding over the same weights).
pub async fn openai_client_sees_no_difference(servers: &[Vllm], gw: &Running) {
    let python = crate::fixture::installed().expect("installed");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("real_vllm")
        .join("openai_client.py");
    let run = |base: String| {
        let (python, script) = (python.clone(), script.clone());
        tokio::task::spawn_blocking(move || {
            let out = std::process::Command::new(python)
                .arg(script)
                .arg(&base)
                .arg(MODEL)
                .output()
                .expect("run the openai client");
            assert!(
                out.status.success(),
                "openai client against {base}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            serde_json::from_str::<serde_json::Value>(&text).expect("its JSON")
        })
    };
    let direct = run(servers[0].url()).await.unwrap();
    let through = run(gw.url.clone()).await.unwrap();
    println!("  direct:  {direct}\n  gateway: {through}");
    assert_eq!(through["models"], serde_json::json!([MODEL]));
    assert_eq!(through["chat"], direct["chat"]);
    assert_eq!(through["completion"], direct["completion"]);
    // The same tokens and usage; how many chunks carry them is vLLM's
    // choice (under load it puts tokens a slow reader has not taken yet
    // into one chunk), so the count is only bounded.
    for field in ["text", "usage"] {
        assert_eq!(through["stream"][field], direct["stream"][field], "{field}");
    }
    assert_eq!(through["stream"]["usage"]["completion_tokens"], 16);
    // A role chunk, the tokens, a finish chunk and the usage chunk.
    assert!(through["stream"]["chunks"].as_u64().unwrap() >= 4);
}

/// The routes a vLLM user calls besides inference answer through the
/// gateway as they do directly, and a request without `model` is
/// served (the fleet serves one model).
pub async fn routes_pass_through(servers: &[Vllm], gw: &Running) {
    let direct = servers[0].url();
    for path in ["/health", "/ping", "/version"] {
        let (d, g) = (
            get(&format!("{direct}{path}")).await,
            get(&format!("{}{path}", gw.url)).await,
        );
        println!(
            "  GET {path}: direct {} {:?}, gateway {} {:?}",
            d.0, d.1, g.0, g.1
        );
        assert_eq!(g, d, "GET {path}");
    }
    let posts = [
        (
            "/tokenize",
            serde_json::json!({"model": MODEL, "prompt": "import os"}),
        ),
        (
            "/detokenize",
            serde_json::json!({"model": MODEL, "tokens": [40, 41, 42]}),
        ),
        (
            "/v1/responses",
            serde_json::json!({"model": MODEL, "input": "def f(x):", "max_output_tokens": 4, "temperature": 0}),
        ),
        // No `model`: vLLM serves its only model, and so does the gateway.
        (
            "/v1/chat/completions",
            serde_json::json!({"messages": [{"role": "user", "content": "x = 1"}], "max_tokens": 4, "temperature": 0}),
        ),
        (
            "/v1/completions",
            serde_json::json!({"prompt": "x = 1", "max_tokens": 4, "temperature": 0}),
        ),
    ];
    for (path, body) in posts {
        let body = body.to_string();
        let d = post(&format!("{direct}{path}"), &body, None).await;
        let g = post(&format!("{}{path}", gw.url), &body, None).await;
        println!(
            "  POST {path}: direct {}, gateway {} via {:?}",
            d.status, g.status, g.backend
        );
        assert_eq!(d.status, 200, "POST {path} direct: {}", d.body);
        assert_eq!(g.status, 200, "POST {path} through the gateway: {}", g.body);
        if path.contains("tokenize") {
            assert_eq!(g.body, d.body, "POST {path}");
        }
    }
    // `GET /v1/models` in OpenAI's shape, from the fleet.
    let (status, body) = get(&format!("{}/v1/models", gw.url)).await;
    assert_eq!(status, 200);
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["object"], "list");
    assert_eq!(list["data"][0]["id"], MODEL);
    assert_eq!(list["data"][0]["object"], "model");
}

/// vLLM's error answers reach the client as vLLM wrote them: a prompt
/// over the context, a bad parameter, an unknown model.
pub async fn error_bodies_are_vllm_s(servers: &[Vllm], gw: &Running) {
    let direct = servers[0].url();
    let long: String = (0..6000).map(|i| format!("w{i} ")).collect();
    let cases = [
        ("context overflow", chat(&long, 4, false)),
        (
            "bad parameter",
            serde_json::json!({"model": MODEL, "messages": [{"role": "user", "content": "a"}], "temperature": -1})
                .to_string(),
        ),
        (
            "unknown model",
            serde_json::json!({"model": "no-such-model", "messages": [{"role": "user", "content": "a"}]})
                .to_string(),
        ),
    ];
    for (what, body) in cases {
        let d = post(&format!("{direct}/v1/chat/completions"), &body, None).await;
        let g = post(&format!("{}/v1/chat/completions", gw.url), &body, None).await;
        println!("  {what}: direct {} {}", d.status, d.body);
        assert!((400..500).contains(&d.status), "{what}: {}", d.status);
        assert_eq!((g.status, &g.body), (d.status, &d.body), "{what}");
    }
}

/// Time to first token through the gateway within 5 ms of direct at the
/// median: 30 short streams each way, interleaved.
pub async fn ttft_within_5_ms_of_direct(servers: &[Vllm], gw: &Running) {
    let (mut direct, mut through) = (Vec::new(), Vec::new());
    for i in 0..30 {
        let body = chat(&format!("row_{i} = compute({i})"), 2, true);
        let d = open_stream(&format!("{}/v1/chat/completions", servers[0].url()), &body).await;
        direct.push(d.ttft);
        d.finish().await.expect("direct stream");
        let g = open_stream(&format!("{}/v1/chat/completions", gw.url), &body).await;
        through.push(g.ttft);
        g.finish().await.expect("stream through the gateway");
    }
    let (direct, through) = (median(direct), median(through));
    println!("  TTFT p50: direct {direct:?}, through the gateway {through:?}");
    assert!(
        through <= direct + Duration::from_millis(5),
        "TTFT p50 {through:?} through the gateway, {direct:?} direct"
    );
}

/// A client that closes a stream mid-way makes vLLM abort the request:
/// its `vllm:num_requests_running` back to what it was within 200 ms.
pub async fn closed_stream_is_aborted_on_the_server(servers: &[Vllm], gw: &Running) {
    const RUNNING: &str = "vllm:num_requests_running";
    let body = chat("while True:", 1500, true);
    let stream = open_stream(&format!("{}/v1/chat/completions", gw.url), &body).await;
    let name = stream.backend.clone().expect("a receipt");
    let server = servers.iter().find(|s| s.name == name).expect("its server");
    let waited = Instant::now();
    while server.metric(RUNNING).await < 1.0 {
        assert!(
            waited.elapsed() < Duration::from_secs(5),
            "the stream never ran"
        );
    }
    drop(stream);
    let closed = Instant::now();
    while server.metric(RUNNING).await > 0.0 {
        assert!(
            closed.elapsed() < Duration::from_secs(5),
            "{name} still runs the closed stream"
        );
    }
    let took = closed.elapsed();
    println!("  {name}: {RUNNING} back to 0 {took:?} after the client closed");
    assert!(took <= Duration::from_millis(200), "abort took {took:?}");
}

/// The gateway exports TTFT and TPOT as Prometheus histograms (which
/// replicas' scrapes can add up), and the median bucket of the TTFT
/// histogram's growth over 10 streams — those of them the balancer timed,
/// read as the difference of two scrapes, not the earlier tests' streams —
/// holds the median the client measured over them, within a factor of 2.
pub async fn ttft_and_tpot_are_histograms(gw: &Running) {
    const TTFT: &str = "model_balance_backend_ttft_seconds";
    let url = format!("{}/v1/chat/completions", gw.url);
    let before = ttft_buckets(gw, TTFT).await;
    let mut measured = Vec::new();
    for i in 0..10 {
        let stream = open_stream(&url, &chat(&format!("total_{i} = sum(rows)"), 8, true)).await;
        measured.push(stream.ttft);
        stream.finish().await.expect("a stream");
    }
    let measured = median(measured);
    let mut buckets = ttft_buckets(gw, TTFT).await;
    for (le, count) in &mut buckets {
        let earlier = before
            .iter()
            .find(|(b, _)| b == le)
            .map_or(0.0, |(_, c)| *c);
        *count -= earlier;
    }
    let total = buckets.last().expect("buckets").1;
    // The balancer times a sample of the requests on the Service path.
    assert!(total >= 1.0, "none of the 10 streams timed: {buckets:?}");
    let at = buckets.iter().position(|(_, c)| *c >= total / 2.0).unwrap();
    let (lower, upper) = (
        at.checked_sub(1).map_or(0.0, |i| buckets[i].0),
        buckets[at].0,
    );
    println!(
        "  client-measured TTFT p50 {measured:?}; the histogram's median bucket ({lower} s, {upper} s] of these {total} streams"
    );
    let m = measured.as_secs_f64();
    assert!(
        lower <= m * 2.0 && upper >= m / 2.0,
        "median bucket ({lower}, {upper}] against {m} s"
    );
}

/// The TTFT histogram `name`'s cumulative count at each bound, summed over
/// the backends, in order of bound; checks both histograms are exported.
async fn ttft_buckets(gw: &Running, name: &str) -> Vec<(f64, f64)> {
    let (status, scrape) = get(&format!("{}/metrics", gw.admin_url)).await;
    assert_eq!(status, 200);
    for histogram in [name, "model_balance_backend_tpot_seconds"] {
        assert!(
            scrape.contains(&format!("# TYPE {histogram} histogram")),
            "{histogram} is no histogram:\n{scrape}"
        );
    }
    let mut buckets: Vec<(f64, f64)> = Vec::new();
    for line in scrape
        .lines()
        .filter(|l| l.starts_with(&format!("{name}_bucket{{")))
    {
        let le = line.split("le=\"").nth(1).and_then(|r| r.split('"').next());
        let le: f64 = match le {
            Some("+Inf") => f64::INFINITY,
            Some(v) => v.parse().expect("a bound"),
            None => continue,
        };
        let count: f64 = line.rsplit(' ').next().unwrap().parse().expect("a count");
        match buckets.iter_mut().find(|(b, _)| *b == le) {
            Some((_, c)) => *c += count,
            None => buckets.push((le, count)),
        }
    }
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    buckets
}

/// The crate's client stack with no gateway: a `ModelBalancer` over a
/// hyper-util client, one `SetOrigin` endpoint per server, the model in
/// `x-model-id`. Streamed chats are read to `[DONE]`, and the balancer's
/// own stream figures (TTFT, TPOT) are those of real token streams.
pub async fn client_stack_streams_from_vllm(servers: &[Vllm]) {
    use http_body_util::{BodyExt, Full};
    use tower::ServiceExt;

    let balancer = crate::gateway::client_balancer(servers);
    for i in 0..6 {
        let request = http::Request::post("/v1/chat/completions")
            .header("x-model-id", MODEL)
            .header("content-type", "application/json")
            .body(Full::from(chat(&format!("fn_{i}(args)"), 8, true)))
            .unwrap();
        let response = balancer.clone().oneshot(request).await.expect("an answer");
        assert_eq!(response.status(), 200);
        let body = response
            .into_body()
            .collect()
            .await
            .expect("the stream")
            .to_bytes();
        let text = String::from_utf8_lossy(&body);
        // A role chunk, the 8 tokens (vLLM puts tokens a slow reader has
        // not taken yet into one chunk), `[DONE]`.
        let chunks = text.matches("data: ").count();
        assert!((3..=10).contains(&chunks), "{chunks} chunks: {text}");
        assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    }
    let streams: Vec<_> = balancer
        .handle()
        .backends()
        .into_iter()
        .filter(|b| b.streams > 0)
        .collect();
    for b in &streams {
        println!(
            "  {}: {} streams, TTFT p50 {:?} ms, TPOT mean {:?} ms",
            b.id, b.streams, b.ttft_p50_ms, b.tpot_mean_ms
        );
        assert!(b.ttft_p50_ms.is_some_and(|ms| ms > 0.0), "{b:?}");
        assert!(b.tpot_mean_ms.is_some_and(|ms| ms > 0.0), "{b:?}");
    }
    assert_eq!(streams.iter().map(|b| b.streams).sum::<u64>(), 6);
}
