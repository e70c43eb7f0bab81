//! Health over real simulated model servers on 127.0.0.1: probes of their
//! KServe v2 and Prometheus endpoints once a second and the passive
//! outcomes of update traffic steer P2C away from a backend that turns 10×
//! slow, one whose queue stays deep, and one failing every request at once.
//! Real sockets cannot use a paused clock: the phases are timed on the real
//! one while the traffic runs, and the shares are counted by the servers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use tokio::time::Instant;
use tower::ServiceExt;
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
use tower_model_balance::health::probe::{
    KServeV2, MetricNames, ProbeClient, ProbeConfig, PrometheusMetrics,
};
use tower_model_balance_sim::{protocol, Fault, ModelServer, ServerConfig};

use crate::sim_balancer;
use sim_balancer::{balancer, Endpoint};

const SLOW: usize = 1;
const DEEP: usize = 4;
const FAILING: usize = 6;

/// Sends updates one after another until `stop`.
async fn updates(balancer: ModelBalancer<Endpoint>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let req = http::Request::post(protocol::infer_path("index"))
            .header("x-model-id", "index")
            .header("x-request-kind", "update")
            .body(Full::from("{}"))
            .unwrap();
        let sent = tokio::time::timeout(Duration::from_secs(10), balancer.clone().oneshot(req));
        if let Ok(Ok(rsp)) = sent.await {
            let _ = rsp.into_body().collect().await;
        }
    }
}

/// Update requests each server received.
fn work(servers: &[ModelServer]) -> Vec<u64> {
    servers.iter().map(|s| s.stats().work).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_deep_queued_and_fast_failing_backends_lose_their_update_traffic() {
    let mut servers = Vec::new();
    for i in 0..8 {
        servers.push(
            ModelServer::start(&format!("node-{i}"), ServerConfig::default())
                .await
                .unwrap(),
        );
    }
    let balancer = balancer(&servers, BalanceConfig::default());
    let handle = balancer.handle();
    let probes = ProbeConfig::builder()
        .interval(Duration::from_secs(1))
        .timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let _probes = handle
        .spawn_probes(
            (
                KServeV2::default(),
                PrometheusMetrics::new(ProbeClient::new(), MetricNames::vllm()),
            ),
            probes,
        )
        .expect("inside a Tokio runtime");
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..16)
        .map(|_| tokio::spawn(updates(balancer.clone(), stop.clone())))
        .collect();

    // Every backend serves a while: latency baselines are learned.
    let start = Instant::now();
    while work(&servers).iter().any(|&n| n < 50) || start.elapsed() < Duration::from_secs(2) {
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    servers[SLOW].set_fault(Some(Fault::Slow {
        factor: 10,
        share: 1.0,
    }));
    servers[DEEP].set_fault(Some(Fault::Backlog { waiting: 40 }));
    servers[FAILING].set_fault(Some(Fault::Unavailable));
    let changed = Instant::now();
    while changed.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let before = work(&servers);
    while changed.elapsed() < Duration::from_secs(9) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let after = work(&servers);
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }

    let sent: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let total: u64 = sent.iter().sum();
    let fair = total as f64 / servers.len() as f64;
    let share = |i: usize| sent[i] as f64 / fair;
    let report = format!("{sent:?} (fair {fair:.0}); health: {:?}", handle.backends());
    assert!(total > 1_000, "enough traffic to judge: {report}");
    assert!(
        share(SLOW) <= 0.5,
        "10x slow: {:.2} of fair, {report}",
        share(SLOW)
    );
    assert!(
        share(DEEP) <= 0.5,
        "deep queue: {:.2} of fair, {report}",
        share(DEEP)
    );
    let failing = sent[FAILING] as f64 / total as f64;
    assert!(failing <= 0.05, "failing: {failing:.3} of all, {report}");
    eprintln!("update shares of fair from 5 s after the change: slow {:.3}, deep queue {:.3}; failing {failing:.4} of all; {report}", share(SLOW), share(DEEP));
}
