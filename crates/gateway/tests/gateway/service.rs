//! The gateway's app (`src/app.rs`, the same code the `gateway` binary
//! runs) on 127.0.0.1, in front of simulated model servers on
//! loopback, driven by a real HTTP client. No sleeps: every wait is on a
//! response or bounded by a count.

use crate::app;
use crate::gateway;

use std::time::Duration;

use bytes::Bytes;
use http::header;
use http_body_util::Full;
use tokio::net::TcpListener;
use tower_model_balance::backend::BackendId;
use tower_model_balance::breaker::BreakerState;
use tower_model_balance::endpoint::Origin;
use tower_model_balance::route::ModelId;
use tower_model_balance_sim::{protocol, Fault};

use app::Config;
use gateway::{held_open, serve, start, truncated};

const CHAT: &str = r#"{"model": "llama-3-8b", "messages": [{"role": "user", "content": "hi"}]}"#;

#[tokio::test]
async fn openai_routes_are_forwarded_as_they_are() {
    let gw = start("openai", 3, |_| {}).await;
    let reply = gw.post("/v1/chat/completions", CHAT).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let body = reply.json();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "llama-3-8b");
    assert_eq!(
        body["choices"][0]["message"]["content"],
        protocol::COMPLETION_TEXT
    );
    let served_by = reply.headers[protocol::BACKEND_HEADER].to_str().unwrap();
    assert!(served_by.starts_with("openai-"), "{served_by}");
    assert_eq!(reply.headers[protocol::COLD_LOAD_HEADER], "true");
    assert_eq!(gw.backend_work(), 1, "one request reached one backend");

    let completion = r#"{"model": "llama-3-8b", "prompt": "hi"}"#;
    let reply = gw.post("/v1/completions", completion).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        reply.json()["choices"][0]["text"],
        protocol::COMPLETION_TEXT
    );
    let embedding = r#"{"model": "bge-small", "input": "hi"}"#;
    let reply = gw.post("/v1/embeddings", embedding).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["object"], "list");
    assert_eq!(reply.json()["model"], "bge-small");
    assert_eq!(gw.handle.stats().no_backend, 0);
    assert_eq!(gw.backend_work(), 3);
    let hedge = gw.hedge.stats();
    assert_eq!(hedge.requests, 3, "every request went through the hedge");
    assert_eq!(hedge.hedges, 0, "too few samples to hedge yet");
}

#[tokio::test]
async fn kserve_v2_infer_is_forwarded() {
    let gw = start("kserve", 2, |_| {}).await;
    let tensor =
        r#"{"inputs": [{"name": "input0", "datatype": "FP32", "shape": [1], "data": [1.0]}]}"#;
    for path in [
        "/v2/models/resnet-50/infer",
        "/v2/models/resnet-50/versions/2/infer",
    ] {
        let reply = gw.post(path, tensor).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
        assert_eq!(reply.json()["model_name"], "resnet-50");
    }
    let stats = gw.handle.stats();
    assert_eq!(
        stats.resident_owner + stats.cold_owner + stats.spill,
        2,
        "{stats:?}"
    );
}

#[tokio::test]
async fn a_body_over_the_limit_is_a_413() {
    let gw = start("limit", 2, |config| config.body_limit = 1024).await;
    let big = format!(
        r#"{{"model": "llama-3-8b", "prompt": "{}"}}"#,
        "x".repeat(2000)
    );
    let reply = gw.post("/v1/completions", big).await;
    assert_eq!(reply.status, 413, "{}", reply.body);
    assert_eq!(reply.json()["error"]["code"], "payload_too_large");
    assert_eq!(gw.backend_work(), 0);
    // Within the limit, the same route serves.
    let small = r#"{"model": "llama-3-8b", "prompt": "hi"}"#;
    assert_eq!(gw.post("/v1/completions", small).await.status, 200);
}

/// The value of `gateway_errors_total{code="…"}` in a scrape, 0 if absent.
fn errors_counted(scrape: &str, code: &str) -> u64 {
    let prefix = format!("gateway_errors_total{{code=\"{code}\"}} ");
    scrape
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map_or(0, |value| value.trim().parse().unwrap())
}

/// Refusals made before the balancer (a body over the limit, a body that
/// is not JSON) are counted too. The recorder is the process's, shared by
/// tests running at once, so the counts only grow by at least ours.
#[tokio::test]
async fn refusals_before_the_balancer_are_counted() {
    let gw = start("counted", 2, |config| config.body_limit = 1024).await;
    let before = gw.admin_get("/metrics").await.body;
    let big = format!(r#"{{"model": "m", "prompt": "{}"}}"#, "x".repeat(2000));
    assert_eq!(gw.post("/v1/completions", big).await.status, 413);
    assert_eq!(gw.post("/v1/completions", "not json").await.status, 400);
    let after = gw.admin_get("/metrics").await.body;
    assert!(after.contains("# HELP gateway_errors_total"), "{after}");
    for code in ["payload_too_large", "invalid_json"] {
        let (was, now) = (errors_counted(&before, code), errors_counted(&after, code));
        assert!(now > was, "{code}: {was} -> {now}\n{after}");
    }
    assert_eq!(gw.backend_work(), 0);
}

#[tokio::test]
async fn every_backend_down_is_a_503_with_retry_after() {
    let gw = start("down", 3, |_| {}).await;
    for sim in &gw.sims {
        sim.set_fault(Some(Fault::Unavailable));
    }
    let completion = r#"{"model": "llama-3-8b", "prompt": "hi"}"#;
    // The backends' own 503s pass through until three in a row open each
    // backend's breaker; then the gateway answers by itself.
    let mut passed_through = 0;
    let own = loop {
        let reply = gw.post("/v1/completions", completion).await;
        assert_eq!(reply.status, 503, "{}", reply.body);
        if reply.headers.contains_key(header::RETRY_AFTER) {
            break reply;
        }
        passed_through += 1;
        assert!(passed_through < 100, "the breakers never opened");
    };
    assert!(
        passed_through >= 3,
        "{passed_through} sent before all opened"
    );
    let secs: u64 = own.headers[header::RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(secs >= 1);
    let error = &own.json()["error"];
    assert_eq!(error["code"], "no_healthy_backend", "{error}");
    assert_eq!(error["type"], "service_unavailable");
    assert!(gw.handle.stats().no_backend >= 1);
    // One breaker per (backend, model): the model's on each backend
    // tripped.
    assert!(gw.handle.stats().pair_breaker_trips >= 2);
    let model = ModelId::new("llama-3-8b").unwrap();
    let out = gw
        .handle
        .backends()
        .iter()
        .filter(|b| {
            gw.handle.breaker_state(&b.id, &model) != Some(BreakerState::Closed) || b.ejected
        })
        .count();
    assert_eq!(out, 3, "{:?}", gw.handle.backends());
}

#[tokio::test]
async fn an_unreachable_backend_is_a_502() {
    // A port that was free a moment ago and has no listener now.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let id = BackendId::new("gone").unwrap();
    let mut config = Config::new(vec![(id, Origin::http(addr))]);
    // With placement on, the load fails first (503, `model_load_failed`).
    config.placement = false;
    let gw = serve(config, Vec::new()).await;
    let reply = gw.post("/v1/chat/completions", CHAT).await;
    assert_eq!(reply.status, 502, "{}", reply.body);
    assert_eq!(reply.json()["error"]["code"], "bad_gateway");
}

#[tokio::test]
async fn other_routes_are_json_errors() {
    let gw = start("routes", 1, |_| {}).await;
    let reply = gw.get("/v1/chat/completions").await;
    assert_eq!(reply.status, 405);
    assert_eq!(reply.json()["error"]["code"], "method_not_allowed");
    let reply = gw.post("/v1/moderations", CHAT).await;
    assert_eq!(reply.status, 404);
    assert_eq!(reply.json()["error"]["code"], "not_found");
    assert_eq!(gw.backend_work(), 0);
}

#[tokio::test]
async fn metrics_lists_the_documented_names() {
    let gw = start("metrics", 2, |_| {}).await;
    let reply = gw.post("/v1/chat/completions", CHAT).await;
    assert_eq!(reply.status, 200);
    let served_by = reply.headers[protocol::BACKEND_HEADER]
        .to_str()
        .unwrap()
        .to_owned();
    // A streamed one, for the TTFT and TPOT histograms (a histogram is
    // shown once it has a sample).
    let streamed = CHAT.replacen('{', r#"{"stream": true, "#, 1);
    let reply = gw.post("/v1/chat/completions", streamed).await;
    assert!(reply.body.ends_with("data: [DONE]\n\n"), "{}", reply.body);

    let reply = gw.admin_get("/metrics").await;
    assert_eq!(reply.status, 200);
    assert!(reply.headers[header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    // Every name of the middleware's src/metrics.rs's table, but
    // placement's and the admission limits' (placement and admission are
    // off here).
    let documented: Vec<&str> = include_str!("../../../../src/metrics.rs")
        .lines()
        .filter_map(|line| line.strip_prefix("//! | `model_balance_"))
        .filter_map(|rest| rest.split('`').next())
        .filter(|name| !matches!(*name, "placement_total" | "backend_admission_limit"))
        .collect();
    assert_eq!(documented.len(), 22, "{documented:?}");
    for name in documented {
        let name = format!("model_balance_{name}");
        // A histogram's series are its `_bucket`s, `_sum` and `_count`.
        let series = [
            format!("{name}{{"),
            format!("{name} "),
            format!("{name}_bucket{{"),
        ];
        assert!(
            reply
                .body
                .lines()
                .any(|l| series.iter().any(|s| l.starts_with(s.as_str()))),
            "{name} missing from\n{}",
            reply.body
        );
    }
    // The figures are this gateway's own, read at the scrape: its two
    // requests, the first on `served_by` (the recorder is the process's:
    // other tests' backends, named otherwise, are in it too).
    let sent: f64 = reply
        .body
        .lines()
        .filter(|l| l.starts_with("model_balance_backend_requests_total{backend=\"metrics-"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(sent, 2.0, "{}", reply.body);
    let prefix = format!("model_balance_backend_requests_total{{backend=\"{served_by}\"}} ");
    assert!(
        reply.body.lines().any(|l| l.starts_with(&prefix)),
        "{prefix} in\n{}",
        reply.body
    );
    let line = format!("model_balance_backend_in_flight{{backend=\"{served_by}\"}} 0");
    assert!(
        reply.body.lines().any(|l| l == line),
        "{line} in\n{}",
        reply.body
    );
}

#[tokio::test]
async fn a_body_the_client_breaks_off_is_its_400_and_no_backend_failure() {
    let gw = start("cut", 3, |_| {}).await;
    for _ in 0..12 {
        let kserve = truncated(gw.addr, "/v2/models/victim/infer", r#"{"inputs":[]}"#).await;
        assert!(kserve.contains(" 400 "), "{kserve}");
        let openai = truncated(gw.addr, "/v1/completions", r#"{"model":"m""#).await;
        assert!(openai.contains(" 400 "), "{openai}");
    }
    for backend in gw.handle.backends() {
        assert_eq!(backend.failures, 0, "{}", backend.id);
        assert_eq!(backend.breaker_trips, 0, "{}", backend.id);
    }
    // The gateway still serves.
    let reply = gw.post("/v2/models/resnet/infer", r#"{"inputs":[]}"#).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}

#[tokio::test]
async fn a_body_announced_over_the_limit_is_a_413_before_it_is_sent() {
    let gw = start("announced", 2, |c| c.body_limit = 1024).await;
    let head = "POST /v1/completions HTTP/1.1\r\nhost: gateway\r\ncontent-length: 2048\r\n\r\n";
    let status = held_open(gw.addr, head, "").await;
    assert!(status.contains("413"), "{status}");
    assert_eq!(gw.backend_work(), 0);
}

#[tokio::test]
async fn a_trickled_body_is_a_408_at_the_deadline_and_no_backend_failure() {
    let gw = start("trickle", 2, |c| {
        c.body_timeout = Duration::from_millis(200)
    })
    .await;
    let head = "POST /v1/completions HTTP/1.1\r\nhost: gateway\r\ncontent-length: 40\r\n\r\n";
    let status = held_open(gw.addr, head, r#"{"model": "#).await;
    assert!(status.contains("408"), "{status}");
    assert_eq!(gw.backend_work(), 0);
    assert!(gw.handle.backends().iter().all(|b| b.failures == 0));
}

#[tokio::test]
async fn the_clients_routing_headers_are_ignored() {
    let gw = start("headers", 3, |_| {}).await;
    let body = r#"{"model": "llama-3-8b", "prompt": "hi"}"#;
    let request = http::Request::post(format!("http://{}/v1/completions", gw.addr))
        .header("x-model-id", "another-model")
        .header("x-urgency", "critical")
        .header("x-request-kind", "update")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let reply = gw.send(request).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let served_by = reply.headers[protocol::BACKEND_HEADER].to_str().unwrap();
    let owners = gw.handle.owners(&ModelId::new("llama-3-8b").unwrap());
    assert!(
        owners.iter().any(|o| o.as_str() == served_by),
        "routed by the body's model to one of its owners {owners:?}, not to {served_by}"
    );
    let stats = gw.handle.stats();
    assert_eq!(stats.update, 0, "the client's x-request-kind was dropped");
    assert_eq!(stats.resident_owner + stats.cold_owner, 1);
}

/// With an admission limit, a request that finds its backend full is
/// answered 429 at once with `Retry-After`, and counted by urgency in
/// `/metrics`; the backend never sees it.
#[tokio::test]
async fn a_backend_at_its_admission_limit_is_a_429_with_retry_after() {
    let gw = start("shed", 1, |config| config.admission_limit = Some(1)).await;
    // The one backend holds the first request unanswered.
    gw.sims[0].set_fault(Some(Fault::Hang));
    let first = {
        let client = gw.client.clone();
        let req = http::Request::post(format!("http://{}/v1/chat/completions", gw.addr))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(CHAT)))
            .unwrap();
        tokio::spawn(async move { client.request(req).await })
    };
    let mut waited = 0;
    while gw.sims[0].stats().hung < 1 {
        assert!(
            waited < 2_000,
            "the first request never reached the backend"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
        waited += 1;
    }
    let work = gw.backend_work();
    let reply = gw.post("/v1/chat/completions", CHAT).await;
    assert_eq!(reply.status, 429, "{}", reply.body);
    assert_eq!(reply.headers[header::RETRY_AFTER], "1");
    let error = &reply.json()["error"];
    assert_eq!(error["code"], "overloaded", "{error}");
    assert_eq!(error["type"], "rate_limit_error");
    assert_eq!(gw.backend_work(), work, "the shed request was never sent");
    assert_eq!(gw.handle.stats().shed_normal, 1);
    let scrape = gw.admin_get("/metrics").await.body;
    assert!(
        scrape.contains("model_balance_shed_total{urgency=\"normal\"}"),
        "{scrape}"
    );
    assert!(scrape.contains("model_balance_backend_admission_limit{backend=\"shed-0\"} 1"));
    first.abort();
}
