//! Issue 51 against MLServer 1.7.1 in explicit model-control mode (real
//! processes, the tiny runtime of `tests/mlserver/`), through the
//! gateway: metadata and readiness GETs never load a model, and a 404 for
//! a version that does not exist neither unloads nor reloads the model
//! nor sends it elsewhere. No sleeps but bounded waits on an answer.
//!
//! Under `CI` a missing server fails the test instead of skipping it.

use std::time::Duration;

use tower_model_balance::backend::BackendId;
use tower_model_balance::route::ModelId;
use tower_model_balance_test_support::{mlserver, real_gateway, real_load};

use mlserver::{Fleet, Kind, Models};
use real_gateway::gateway;

use real_load::SERIAL;

/// Waits (at most 20 s) until `GET path` through the gateway answers
/// `status`.
async fn until_status(addr: std::net::SocketAddr, path: &str, status: u16) {
    let client = mlserver::client();
    for _ in 0..200 {
        if mlserver::get(&client, addr, path).await.0 == status {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{path} never answered {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_gets_load_nothing_and_a_missing_version_unloads_nothing() {
    let _serial = SERIAL.lock().await;
    let models = Models::new(2, Duration::from_millis(200), Duration::from_millis(5));
    let Some(fleet) = Fleet::start(Kind::MlServer, 2, models).await else {
        return;
    };
    let gw = gateway(&fleet, |_| {}).await;
    let client = mlserver::client();
    until_status(gw.addr, "/v2/health/ready", 200).await;

    // 1. Metadata and readiness of a model no server has loaded: 404 from
    //    the gateway, and nothing loaded anywhere.
    for path in [
        "/v2/models/m0",
        "/v2/models/m0/ready",
        "/v2/models/m0/versions/1",
        "/v2/models/m0/versions/1/ready",
    ] {
        let (status, body) = mlserver::get(&client, gw.addr, path).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert!(body.contains("m0"), "{path}: {body}");
    }
    for server in &fleet.servers {
        assert!(server.ready_models().await.is_empty(), "{}", server.name);
    }
    assert_eq!(gw.handle.placement_stats().unwrap().loads, 0);

    // 2. Inference loads it; then its metadata comes from the server
    //    holding it, once the probes have seen it there.
    let (status, body) = mlserver::post(
        &client,
        gw.addr,
        "/v2/models/m0/infer",
        mlserver::infer_body(0),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    until_status(gw.addr, "/v2/models/m0/ready", 200).await;
    let (status, body) = mlserver::get(&client, gw.addr, "/v2/models/m0").await;
    assert_eq!(status, 200, "{body}");
    let meta: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(meta["name"], "m0", "{body}");
    let holders: Vec<String> = {
        let mut holders = Vec::new();
        for server in &fleet.servers {
            if server.ready_models().await.contains(&"m0".to_owned()) {
                holders.push(server.name.clone());
            }
        }
        holders
    };
    assert_eq!(holders.len(), 1, "loaded on one server: {holders:?}");
    let holder = BackendId::new(&holders[0]).unwrap();
    let m0 = ModelId::new("m0").unwrap();
    assert!(gw.handle.is_resident(&holder, &m0));

    // 3. A version that does not exist: MLServer answers 404 "Model m0
    //    with version 7 not found". The model stays resident where it is,
    //    is not reloaded, and is not sent (and loaded) elsewhere.
    let granted = gw._gateway.hedge.budget().granted();
    let path = "/v2/models/m0/versions/7/infer";
    let (status, body) = mlserver::post(&client, gw.addr, path, mlserver::infer_body(0)).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("version 7"), "{body}");
    assert!(gw.handle.is_resident(&holder, &m0), "still resident");
    let placement = gw.handle.placement_stats().unwrap();
    assert_eq!(
        (placement.loads, placement.reloads),
        (1, 0),
        "{placement:?}"
    );
    for server in &fleet.servers {
        let ready = server.ready_models().await;
        let holds = ready.contains(&"m0".to_owned());
        assert_eq!(
            holds,
            server.name == holders[0],
            "{}: {ready:?}",
            server.name
        );
    }
    assert_eq!(gw._gateway.hedge.budget().granted(), granted, "no retry");
    // tritonclient: a model loaded is ready and has metadata; one not
    // loaded is loaded by its inference first (the script infers first).
    let stdout = real_gateway::tritonclient(gw.addr, &["m0", "m1"]).await;
    assert_eq!(
        stdout.matches("JSON inference ok, ready, metadata").count(),
        2,
        "{stdout}"
    );
    // The model answers warm, as before.
    let (status, _) = mlserver::post(
        &client,
        gw.addr,
        "/v2/models/m0/infer",
        mlserver::infer_body(1),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        gw.handle.placement_stats().unwrap().loads,
        2,
        "m0 once, m1 once"
    );
}
