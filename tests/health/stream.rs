//! Health judges a stream by its first token, over real simulated servers
//! on 127.0.0.1 streaming server-sent events through the balancer: of two
//! backends that turn slow (health ejects a backend slow against its own
//! baseline, so each first serves fast), one whose first token turned slow
//! is ejected, one that streams slowly after a fast first token is not; timing whole streams
//! (`StopPoint::EndOfBody`) ejects the slow streamer, which shows the
//! first is the stop point's doing. Real sockets cannot use a paused
//! clock: each run lasts until the counts it waits for are reached (a
//! bound fails it), and ejections are read from cumulative counters.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use tower::ServiceExt;
use tower_model_balance::balance::{BackendStatus, BalanceConfig, BalancerHandle, ModelBalancer};
use tower_model_balance::classify::StopPoint;
use tower_model_balance_sim::{Fault, InferenceTimes, ModelServer, ServerConfig};

use crate::sim_balancer;
use sim_balancer::Endpoint;

/// Every wait is bounded: a broken balancer fails instead of hanging.
const BOUND: Duration = Duration::from_secs(60);
const MODELS: usize = 12;

/// Six servers: 5–10 ms prefill, 10 tokens 5 ms apart (about 60 ms a
/// stream).
async fn servers() -> Vec<ModelServer> {
    let config = ServerConfig::builder()
        .cold_load(Duration::from_millis(20))
        .inference(InferenceTimes::new(0, 5, 10).unwrap())
        .decode_time(Duration::from_millis(5))
        .stream_tokens(10)
        .concurrency(8)
        .build()
        .unwrap();
    let mut servers = Vec::new();
    for i in 0..6 {
        servers.push(
            ModelServer::start(&format!("node-{i}"), config.clone())
                .await
                .unwrap(),
        );
    }
    servers
}

fn balancer(servers: &[ModelServer], stop: StopPoint) -> ModelBalancer<Endpoint> {
    let config = BalanceConfig::builder().stop_point(stop).build().unwrap();
    sim_balancer::balancer(servers, config)
}

/// Streams chat completions one after another, model after model, until
/// `stop`, each read to its end.
async fn streams(balancer: ModelBalancer<Endpoint>, worker: usize, stop: Arc<AtomicBool>) {
    let mut i = worker;
    while !stop.load(Ordering::Relaxed) {
        let model = format!("m{}", i % MODELS);
        i += 1;
        let body = format!(
            r#"{{"model": "{model}", "stream": true, "messages": [{{"role": "user", "content": "hi"}}]}}"#
        );
        let req = http::Request::post("/v1/chat/completions")
            .header("x-model-id", &model)
            .body(Full::from(body))
            .unwrap();
        let sent = tokio::time::timeout(Duration::from_secs(10), balancer.clone().oneshot(req));
        if let Ok(Ok(rsp)) = sent.await {
            let _ = rsp.into_body().collect().await;
        }
    }
}

/// Runs 12 stream workers until `done` holds for the handle's backends.
async fn run_until(
    balancer: &ModelBalancer<Endpoint>,
    done: impl Fn(&[BackendStatus]) -> bool,
) -> Vec<BackendStatus> {
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..12)
        .map(|w| tokio::spawn(streams(balancer.clone(), w, stop.clone())))
        .collect();
    let handle: BalancerHandle = balancer.handle();
    let watch = async {
        loop {
            let now = handle.backends();
            if done(&now) {
                return now;
            }
            // A count read each 50 ms: the exit condition, not a guess.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let result = tokio::time::timeout(BOUND, watch).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.await;
    }
    result.unwrap_or_else(|_| panic!("not reached: {:#?}", handle.backends()))
}

/// Serves until every backend has streamed 30 answers at its speed: the
/// baselines that slowness is judged against.
async fn warm(balancer: &ModelBalancer<Endpoint>) {
    run_until(balancer, |b| b.iter().all(|b| b.streams >= 30)).await;
}

fn by_name<'a>(status: &'a [BackendStatus], name: &str) -> &'a BackendStatus {
    status.iter().find(|b| b.id.as_str() == name).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_first_token_is_ejected_and_a_slow_stream_after_a_fast_one_is_not() {
    let servers = servers().await;
    let balancer = balancer(&servers, StopPoint::FirstFrame);
    warm(&balancer).await;
    // node-1: every first token 30× slower (150–300 ms of prefill).
    servers[1].set_fault(Some(Fault::Slow {
        factor: 30,
        share: 1.0,
    }));
    // node-2: a fast first token, then 30× slower tokens (1.5 s a stream).
    servers[2].set_fault(Some(Fault::SlowDecode { factor: 30 }));
    let before = by_name(&balancer.handle().backends(), "node-2").streams;
    let end = run_until(&balancer, |b| {
        by_name(b, "node-1").ejections >= 1 && by_name(b, "node-2").streams >= before + 20
    })
    .await;
    let (first, decode) = (by_name(&end, "node-1"), by_name(&end, "node-2"));
    let fast = by_name(&end, "node-0");
    eprintln!(
        "stream-health: slow first token: ttft p50 {:?} ms, ejected {}×; slow decode: ttft p50 {:?} ms, tpot {:?} ms, {} streams, ejected {}×; fast: ttft p50 {:?} ms, tpot {:?} ms",
        first.ttft_p50_ms, first.ejections, decode.ttft_p50_ms, decode.tpot_mean_ms,
        decode.streams, decode.ejections, fast.ttft_p50_ms, fast.tpot_mean_ms,
    );
    assert_eq!(decode.ejections, 0, "{decode:?}");
    let tpot = decode.tpot_mean_ms.unwrap();
    // A mean since it joined: its fast streams before the fault in it.
    assert!(
        tpot > 5.0 * fast.tpot_mean_ms.unwrap(),
        "it did stream slowly: {tpot} ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timing_whole_streams_ejects_the_slow_streamer() {
    let servers = servers().await;
    let balancer = balancer(&servers, StopPoint::EndOfBody);
    warm(&balancer).await;
    servers[2].set_fault(Some(Fault::SlowDecode { factor: 30 }));
    let end = run_until(&balancer, |b| by_name(b, "node-2").ejections >= 1).await;
    assert!(by_name(&end, "node-2").ejections >= 1);
}
