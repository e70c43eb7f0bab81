//! KServe v2 metadata and readiness GETs are not inference (issue 51): on
//! simulated servers in explicit mode with placement on, they load
//! nothing, send nothing to a backend that does not hold the model, and
//! leave nothing behind in the balancer, however many names they carry.

use std::time::Duration;

use tower_model_balance_sim::ServerConfig;

use crate::gateway::{start_with, Running};

/// Two servers in explicit mode whose repository lists `m0` and `m1`,
/// none loaded; the gateway loads on demand.
async fn explicit_fleet() -> Running {
    let server = ServerConfig::builder()
        .explicit_load(true)
        .repository(["m0", "m1"])
        .build()
        .unwrap();
    let gw = start_with("meta", 2, server, |config| {
        config.placement = true;
        let fast = "[probe]\ninterval_ms = 100".parse().unwrap();
        config.stack = crate::app::stack_config(&fast).unwrap();
    })
    .await;
    // The probes' first round: the backends and their (empty) lists known.
    tokio::time::timeout(Duration::from_secs(10), async {
        while gw.handle.placement_stats().is_none()
            || gw.get("/v2/health/ready").await.status != 200
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the probes answer");
    gw
}

/// What the balancer routed and placement did, in all.
fn footprint(gw: &Running) -> (u64, u64, u64, u64) {
    let stats = gw.handle.stats();
    let routed = stats.resident_owner + stats.cold_owner + stats.spill + stats.panic;
    let placement = gw.handle.placement_stats().unwrap();
    let sent: u64 = gw
        .sims
        .iter()
        .map(|s| s.stats().work + s.stats().load_calls)
        .sum();
    (routed, placement.loads, placement.unknown_models, sent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metadata_get_of_a_model_not_loaded_does_not_load_it() {
    let gw = explicit_fleet().await;
    for path in [
        "/v2/models/m0",
        "/v2/models/m0/ready",
        "/v2/models/m1/versions/1",
        "/v2/models/m1/versions/1/ready",
    ] {
        let reply = gw.get(path).await;
        assert_eq!(
            footprint(&gw),
            (0, 0, 0, 0),
            "{path}: routed, loads, refusals, sent"
        );
        assert_eq!(reply.status, 404, "{path}: {}", reply.body);
        let error = reply.json()["error"].as_str().unwrap().to_owned();
        assert!(error.contains("is not loaded on any backend"), "{error}");
    }
    // An inference request loads it; that is what loads are for.
    let reply = gw.post("/v2/models/m0/infer", r#"{"inputs":[]}"#).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(gw.handle.placement_stats().unwrap().loads, 1);
}

/// 20,000 distinct names in metadata and readiness GETs: no load, no
/// refusal counted, nothing routed, nothing sent to a backend. Each GET
/// is answered from the catalog the probes keep, which a name it does not
/// hold leaves as it was (the lookup allocates only for the backends it
/// returns), so the count does not matter: a million do the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_distinct_names_in_metadata_gets_load_nothing_and_grow_nothing() {
    const NAMES: usize = 20_000;
    let gw = std::sync::Arc::new(explicit_fleet().await);
    let before = footprint(&gw);
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..8 {
        let gw = gw.clone();
        tasks.spawn(async move {
            for i in (worker..NAMES).step_by(8) {
                let path = match i % 2 {
                    0 => format!("/v2/models/name-{i}"),
                    _ => format!("/v2/models/name-{i}/versions/{i}/ready"),
                };
                assert_eq!(gw.get(&path).await.status, 404, "{path}");
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    assert_eq!(before, (0, 0, 0, 0));
    assert_eq!(footprint(&gw), before, "routed, loads, refusals, sent");
    // The balancer learned of no model: none is resident anywhere, and
    // the repository's models load on inference as before.
    let reply = gw.post("/v2/models/m1/infer", r#"{"inputs":[]}"#).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}
