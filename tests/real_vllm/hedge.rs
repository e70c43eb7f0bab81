//! The hedge against real vLLM: the copy that loses the race is cancelled
//! on its server, not left generating.

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use tokio::time::Instant;
use tower::{Layer, ServiceExt};
use tower_model_balance::backend::BackendId;
use tower_model_balance::hedge::{HedgeConfig, HedgeLayer};
use tower_model_balance::route::ModelId;

use crate::fixture::{Vllm, MODEL};
use crate::gateway::chat;

const RUNNING: &str = "vllm:num_requests_running";

/// The crate's client stack (hedge over the balancer over a hyper-util
/// client), a backup after 100 ms: a long non-streamed chat runs on both
/// servers at once; when one copy answers, the other's server aborts it —
/// its `vllm:num_requests_running` back to 0 within 200 ms.
pub async fn a_lost_hedge_is_aborted_on_the_server(servers: &[Vllm]) {
    let balancer = crate::gateway::client_balancer(servers);
    // Each server serves the model, as its `/v1/models` says.
    let model = ModelId::new(MODEL).unwrap();
    for s in servers {
        let id = BackendId::new(&s.name).unwrap();
        assert!(balancer.handle().set_resident_models(&id, [&model]));
    }
    let delay = Duration::from_millis(100);
    let policy = HedgeConfig::builder()
        .min_samples(0)
        .floor(delay)
        .ceiling(delay)
        .budget_ratio(1.0)
        .build()
        .unwrap();
    let layer = HedgeLayer::new(policy);
    let hedges = layer.handle();
    let stack = layer.layer(balancer);
    let request = http::Request::post("/v1/chat/completions")
        .header("x-model-id", MODEL)
        .header("content-type", "application/json")
        .body(Full::from(chat("while True:", 1500, false)))
        .unwrap();
    let call = tokio::spawn(stack.oneshot(request));
    // Both copies run.
    let started = Instant::now();
    loop {
        let mut both = true;
        for s in servers {
            both &= s.metric(RUNNING).await >= 1.0;
        }
        if both {
            break;
        }
        assert!(
            !call.is_finished() && started.elapsed() < Duration::from_secs(10),
            "the backup never ran beside the first attempt: {:?}",
            hedges.stats()
        );
    }
    let response = call.await.unwrap().expect("an answer");
    let answered = Instant::now();
    assert_eq!(response.status(), 200);
    let _ = response.into_body().collect().await.expect("the body");
    let s = hedges.stats();
    assert_eq!(s.hedges, 1, "{s:?}");
    for server in servers {
        while server.metric(RUNNING).await > 0.0 {
            assert!(
                answered.elapsed() < Duration::from_secs(5),
                "{} still runs the losing copy",
                server.name
            );
        }
    }
    let took = answered.elapsed();
    println!(
        "  both copies ran; {} won by the backup; {RUNNING} 0 on both servers {took:?} after the answer",
        s.hedges_won
    );
    assert!(took <= Duration::from_millis(200), "abort took {took:?}");
}
