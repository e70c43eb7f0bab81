//! The probers against real servers on 127.0.0.1: simulated model servers
//! (which serve the KServe v2, OpenAI and Prometheus APIs) and tiny hyper
//! servers answering fixed bodies. Driven by responses and by the servers'
//! counters, never by sleeping.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tower_model_balance::backend::BackendId;
use tower_model_balance::endpoint::Origin;
use tower_model_balance::health::probe::{
    KServeV2, MetricNames, OpenAiModels, ProbeClient, ProbeError, ProbeReport, ProbeTarget, Prober,
    PrometheusMetrics,
};
use tower_model_balance::route::ModelId;
use tower_model_balance_sim::{protocol, Fault, InferenceTimes, ModelServer, ServerConfig};

/// A bound so that a broken server fails a test instead of hanging it.
const BOUND: Duration = Duration::from_secs(10);

/// The tests' HTTP client: inference requests go through it, and the
/// probers share its pool ([`ProbeClient::from_client`]).
type Http = Client<HttpConnector, Full<Bytes>>;

fn http() -> Http {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new()).build(connector)
}

/// A prober's client, sharing `http`'s pool.
fn shared(http: &Http) -> ProbeClient {
    ProbeClient::from_client(http.clone())
}

fn target(addr: SocketAddr) -> ProbeTarget {
    ProbeTarget::new(BackendId::new("probed").unwrap(), Origin::http(addr))
}

async fn probe(prober: &impl Prober, addr: SocketAddr) -> Result<ProbeReport, ProbeError> {
    tokio::time::timeout(BOUND, prober.probe(&target(addr)))
        .await
        .expect("the probe answered within the bound")
}

/// A server with quick loads and inferences of `ms` milliseconds.
async fn server(slots: usize, concurrency: usize, ms: u64) -> ModelServer {
    let config = ServerConfig::builder()
        .resident_slots(slots)
        .concurrency(concurrency)
        .cold_load(Duration::from_millis(5))
        .inference(InferenceTimes::new(0, ms, ms).unwrap())
        .model_memory(1 << 30)
        .build()
        .unwrap();
    ModelServer::start("sim-0", config).await.unwrap()
}

/// One inference request to `server`; its status and resident-models
/// header.
async fn infer(client: &Http, server: &ModelServer, model: &str) -> (u16, String) {
    let uri = format!("http://{}{}", server.addr(), protocol::infer_path(model));
    let req = http::Request::post(uri).body(Full::from("{}")).unwrap();
    let rsp = tokio::time::timeout(BOUND, client.request(req))
        .await
        .unwrap()
        .unwrap();
    let resident = rsp
        .headers()
        .get(protocol::RESIDENT_MODELS_HEADER)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (rsp.status().as_u16(), resident)
}

fn sorted(models: &[ModelId]) -> Vec<String> {
    let mut names: Vec<String> = models.iter().map(|m| m.as_str().to_owned()).collect();
    names.sort_unstable();
    names
}

fn resident(server: &ModelServer) -> Vec<String> {
    let mut names = server.resident_models();
    names.sort_unstable();
    names
}

/// Lets the servers run until `done` holds; fails, never hangs.
async fn until(done: impl Fn() -> bool) {
    let deadline = Instant::now() + BOUND;
    while !done() {
        assert!(Instant::now() < deadline, "the condition did not come true");
        tokio::task::yield_now().await;
    }
}

/// Serves `status` and `body` to every request, on 127.0.0.1.
async fn fixed(status: u16, body: &'static [u8]) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = service_fn(move |_req| async move {
                let mut rsp = http::Response::new(Full::new(Bytes::from_static(body)));
                *rsp.status_mut() = http::StatusCode::from_u16(status).unwrap();
                Ok::<_, Infallible>(rsp)
            });
            tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
        }
    });
    addr
}

#[tokio::test]
async fn model_lists_are_the_resident_models() {
    let server = server(2, 4, 1).await;
    let client = http();
    let kserve = KServeV2::new(shared(&client));
    let openai = OpenAiModels::new(shared(&client));

    let report = probe(&kserve, server.addr()).await.unwrap();
    assert_eq!(report.ready, Some(true));
    assert_eq!(report.resident_models, Some(vec![]));

    for model in ["resnet-50", "bert-base", "resnet-50", "t5-small"] {
        let (status, header) = infer(&client, &server, model).await;
        assert_eq!(status, 200);
        assert_eq!(
            header,
            resident(&server).join(","),
            "the header lists the resident models"
        );
    }
    // Two slots: bert-base was evicted by t5-small.
    assert_eq!(resident(&server), ["resnet-50", "t5-small"]);

    let report = probe(&kserve, server.addr()).await.unwrap();
    assert_eq!(report.ready, Some(true));
    assert_eq!(sorted(&report.resident_models.unwrap()), resident(&server));
    assert!(report.load.is_empty());

    let report = probe(&openai, server.addr()).await.unwrap();
    assert_eq!(report.ready, Some(true));
    assert_eq!(sorted(&report.resident_models.unwrap()), resident(&server));

    // Without the index: readiness only.
    let report = probe(&kserve.clone().without_repository_index(), server.addr())
        .await
        .unwrap();
    assert_eq!((report.ready, report.resident_models), (Some(true), None));
}

#[tokio::test]
async fn metrics_match_the_servers_state() {
    let server = server(3, 4, 1).await;
    let client = http();
    for model in ["a", "b"] {
        assert_eq!(infer(&client, &server, model).await.0, 200);
    }
    let names = MetricNames::vllm().and(MetricNames::triton());
    let prober = PrometheusMetrics::new(shared(&client), names);
    let report = probe(&prober, server.addr()).await.unwrap();
    assert_eq!((report.ready, report.resident_models.clone()), (None, None));
    let gib = (1u64 << 30) as f64;
    let load = report.load;
    assert_eq!(
        load.gpu_memory_used_bytes,
        Some(2.0 * gib),
        "2 resident × 1 GiB"
    );
    assert_eq!(
        load.gpu_memory_total_bytes,
        Some(3.0 * gib),
        "3 slots × 1 GiB"
    );
    assert_eq!(load.requests_running, Some(0.0));
    assert_eq!(load.requests_waiting, Some(0.0));
    assert_eq!(load.kv_cache_usage, Some(0.0));

    // A Triton-like pair: readiness and models, then GPU memory.
    let pair = (
        KServeV2::default(),
        PrometheusMetrics::new(ProbeClient::new(), MetricNames::triton()),
    );
    let report = probe(&pair, server.addr()).await.unwrap();
    assert_eq!(report.ready, Some(true));
    assert_eq!(sorted(&report.resident_models.unwrap()), ["a", "b"]);
    assert_eq!(report.load.gpu_memory_used_bytes, Some(2.0 * gib));
    assert_eq!(
        report.load.requests_waiting, None,
        "not in the Triton preset"
    );
}

#[tokio::test]
async fn queue_depth_is_reported_truthfully() {
    // One slot, minute-long inferences: the first request holds the slot,
    // the second waits for it, for as long as the test runs.
    let server = server(2, 1, 60_000).await;
    let client = http();
    let prober = PrometheusMetrics::new(shared(&client), MetricNames::vllm());
    let mut held = Vec::new();
    for model in ["a", "b"] {
        let (client, uri) = (client.clone(), server.addr());
        held.push(tokio::spawn(async move {
            let uri = format!("http://{uri}{}", protocol::infer_path(model));
            let req = http::Request::post(uri).body(Full::from("{}")).unwrap();
            let _ = client.request(req).await;
        }));
    }
    until(|| server.stats().running == 1 && server.stats().waiting == 1).await;
    let load = probe(&prober, server.addr()).await.unwrap().load;
    assert_eq!(load.requests_running, Some(1.0));
    assert_eq!(load.requests_waiting, Some(1.0));
    assert_eq!(load.kv_cache_usage, Some(1.0));

    // Forty phantom requests ahead: reported on top of the real queue.
    server.set_fault(Some(Fault::Backlog { waiting: 40 }));
    let load = probe(&prober, server.addr()).await.unwrap().load;
    assert_eq!(load.requests_waiting, Some(41.0));
    assert_eq!(load.requests_running, Some(1.0), "phantoms hold no slot");

    // Under Unavailable, a request answers 503 at once: it does not wait
    // for the held slot.
    server.set_fault(Some(Fault::Unavailable));
    assert_eq!(infer(&client, &server, "c").await.0, 503);
    for task in held {
        task.abort();
    }
}

#[tokio::test]
async fn backlog_and_slow_faults_delay_requests() {
    // Two slots, 20 ms inferences.
    let server = server(4, 2, 20).await;
    let client = http();
    assert_eq!(infer(&client, &server, "m").await.0, 200);

    // Four phantoms ahead, two at once: two rounds of 20 ms first.
    server.set_fault(Some(Fault::Backlog { waiting: 4 }));
    let started = Instant::now();
    assert_eq!(infer(&client, &server, "m").await.0, 200);
    assert!(
        started.elapsed() >= Duration::from_millis(60),
        "{:?}",
        started.elapsed()
    );

    // Ten times slower, none failing.
    server.set_fault(Some(Fault::Slow {
        factor: 10,
        share: 1.0,
    }));
    let started = Instant::now();
    assert_eq!(infer(&client, &server, "m").await.0, 200);
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(server.stats().unavailable, 0);
}

#[tokio::test]
async fn an_unavailable_server_is_not_ready() {
    let server = server(2, 4, 1).await;
    let client = http();
    assert_eq!(infer(&client, &server, "a").await.0, 200);
    server.set_fault(Some(Fault::Unavailable));

    // "Not ready" is an answer, not a failure; the index is not asked.
    let report = probe(&KServeV2::new(shared(&client)), server.addr())
        .await
        .unwrap();
    assert_eq!((report.ready, report.resident_models), (Some(false), None));
    let error = probe(&OpenAiModels::new(shared(&client)), server.addr())
        .await
        .unwrap_err();
    assert!(
        matches!(error, ProbeError::Status(s) if s == 503),
        "{error}"
    );
    let metrics = PrometheusMetrics::new(shared(&client), MetricNames::vllm());
    let error = probe(&metrics, server.addr()).await.unwrap_err();
    assert!(
        matches!(error, ProbeError::Status(s) if s == 503),
        "{error}"
    );

    server.set_fault(None);
    let report = probe(&KServeV2::default(), server.addr()).await.unwrap();
    assert_eq!(report.ready, Some(true));
}

#[tokio::test]
async fn a_malformed_answer_fails_that_probe_only() {
    let garbage = fixed(200, b"<html>gateway says hi</html>").await;
    let good = server(2, 4, 1).await;
    let client = http();
    assert_eq!(infer(&client, &good, "a").await.0, 200);

    let kserve = KServeV2::new(shared(&client));
    let openai = OpenAiModels::new(shared(&client));
    let metrics = PrometheusMetrics::new(shared(&client), MetricNames::vllm());
    // KServe v2: readiness (200) stands; the index is a signal of its own,
    // left out when it cannot be read.
    let report = probe(&kserve, garbage).await.unwrap();
    assert_eq!(report.ready, Some(true));
    assert_eq!(report.resident_models, None, "the index was garbage");
    assert!(!report.is_failure());
    for (error, path) in [
        (probe(&openai, garbage).await.unwrap_err(), "/v1/models"),
        (probe(&metrics, garbage).await.unwrap_err(), "/metrics"),
    ] {
        assert!(
            matches!(&error, ProbeError::Malformed { what } if what.starts_with(path)),
            "{error}"
        );
    }
    // The same probers, the same client: the well-behaved server is fine.
    let report = probe(&kserve, good.addr()).await.unwrap();
    assert_eq!(sorted(&report.resident_models.unwrap()), ["a"]);
    assert_eq!(
        sorted(
            &probe(&openai, good.addr())
                .await
                .unwrap()
                .resident_models
                .unwrap()
        ),
        ["a"]
    );
    assert_eq!(
        probe(&metrics, good.addr())
            .await
            .unwrap()
            .load
            .requests_waiting,
        Some(0.0)
    );

    // A KV-cache usage above 1 is not believed.
    let odd = fixed(200, b"vllm:kv_cache_usage_perc{engine=\"0\"} 1.5\n").await;
    let error = probe(&metrics, odd).await.unwrap_err();
    assert!(
        matches!(&error, ProbeError::Malformed { what } if what.contains("[0, 1]")),
        "{error}"
    );

    // A body past the cap is malformed, not read whole.
    static HUGE: [u8; 2 << 20] = [b' '; 2 << 20];
    let huge = fixed(200, &HUGE).await;
    let error = probe(&openai, huge).await.unwrap_err();
    assert!(
        matches!(&error, ProbeError::Malformed { what } if what.contains("larger")),
        "{error}"
    );

    // Any status other than 2xx from /v1/models is a status error.
    let teapot = fixed(418, b"").await;
    let error = probe(&openai, teapot).await.unwrap_err();
    assert!(
        matches!(error, ProbeError::Status(s) if s == 418),
        "{error}"
    );
}

#[tokio::test]
async fn a_refused_connection_is_a_transport_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    for error in [
        probe(&KServeV2::default(), addr).await.unwrap_err(),
        probe(&OpenAiModels::default(), addr).await.unwrap_err(),
        probe(
            &PrometheusMetrics::new(ProbeClient::new(), MetricNames::triton()),
            addr,
        )
        .await
        .unwrap_err(),
    ] {
        assert!(matches!(error, ProbeError::Transport(_)), "{error}");
    }
}

#[tokio::test]
async fn metrics_on_a_port_of_their_own() {
    // Triton serves metrics on another port than inference: the target is
    // the inference origin, the metrics are asked on the sim's port.
    let server = server(2, 4, 1).await;
    let elsewhere = fixed(404, b"").await;
    let prober = PrometheusMetrics::new(ProbeClient::new(), MetricNames::triton())
        .on_port(server.addr().port());
    let report = probe(&prober, elsewhere).await.unwrap();
    assert_eq!(report.load.gpu_memory_used_bytes, Some(0.0));
}

#[tokio::test]
async fn absent_metrics_are_no_metrics_and_never_fail_the_probe() {
    let client = http();
    let metrics = PrometheusMetrics::new(shared(&client), MetricNames::vllm());
    // MLServer's HTTP port has no /metrics: 404.
    let absent = fixed(404, br#"{"detail":"Not Found"}"#).await;
    assert_eq!(
        probe(&metrics, absent).await.unwrap(),
        ProbeReport::default()
    );

    // Readiness and residency from one server, metrics from another
    // origin (MLServer's metrics port): the pair asks each where it is.
    let good = server(2, 4, 1).await;
    assert_eq!(infer(&client, &good, "a").await.0, 200);
    let pair = (KServeV2::new(shared(&client)), metrics.clone());
    let at = |metrics: SocketAddr| target(good.addr()).with_metrics_address(Origin::http(metrics));
    let report = pair.probe(&at(good.addr())).await.unwrap();
    assert_eq!(sorted(&report.resident_models.unwrap()), ["a"]);
    assert!(report.load.requests_running.is_some(), "metrics read there");
    // Metrics absent there, or broken: readiness and residency stand.
    for broken in [absent, fixed(500, b"oops").await] {
        let report = pair.probe(&at(broken)).await.unwrap();
        assert_eq!(report.ready, Some(true));
        assert_eq!(sorted(&report.resident_models.unwrap()), ["a"]);
        assert!(report.load.is_empty(), "{:?}", report.load);
    }
}
