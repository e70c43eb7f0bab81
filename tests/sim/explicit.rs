//! The simulated server's explicit model-control mode over real HTTP on
//! 127.0.0.1: Triton's repository load / unload / index (vLLM's LoRA
//! adapter routes: `tests/sim/lora.rs`). Driven by counts and by the
//! server's stats hook, never by sleeping: concurrent loads are held in
//! flight by `Fault::LoadHangs`.

use std::time::Duration;

use crate::sim_explicit;
use crate::sim_http;

use http_body_util::Full;

use sim_explicit::{explicit, index, infer, post, ready, state, stats_until};
use sim_http::{client, BOUND};
use tower_model_balance_sim::{protocol, Fault, InferenceTimes, ModelServer, ServerConfig};

#[tokio::test]
async fn a_request_before_its_load_is_404_and_loads_nothing() {
    let server = ModelServer::start("node-0", explicit().build().unwrap())
        .await
        .unwrap();
    let client = client();
    let (status, _, body) = infer(&client, &server, "resnet-50").await;
    assert_eq!(status, 404);
    assert_eq!(
        body,
        r#"{"error":"Request for unknown model: 'resnet-50' is not found"}"#
    );
    let stats = server.stats();
    assert_eq!((stats.not_found, stats.cold_loads), (1, 0));
    assert_eq!((stats.load_calls, stats.loads_started), (0, 0));
    assert!(server.resident_models().is_empty());

    let load = protocol::load_path("resnet-50");
    assert_eq!(
        post(&client, &server, &load, "").await,
        (200, String::new())
    );
    let (status, cold, _) = infer(&client, &server, "resnet-50").await;
    assert_eq!((status, cold), (200, false), "loaded: served warm");
    // Loaded already: 200 at once, nothing started.
    assert_eq!(
        post(&client, &server, &load, "{}").await,
        (200, String::new())
    );
    let stats = server.stats();
    assert_eq!((stats.load_calls, stats.loads_started), (2, 1));
    assert_eq!(stats.cold_loads, 1, "a load call's load is a cold load");
    assert_eq!(
        stats.max_concurrent_loads_per_model, 1,
        "one call at a time"
    );
    assert_eq!((stats.not_found, stats.loads_failed), (1, 0));
    assert_eq!(server.resident_models(), ["resnet-50"]);
    // Names are percent-decoded from the path (clients encode them).
    let load = protocol::load_path("org/model:v1");
    assert_eq!(post(&client, &server, &load, "{}").await.0, 200);
    let mut resident = server.resident_models();
    resident.sort();
    assert_eq!(resident, ["org/model:v1", "resnet-50"]);
    // Updates need no resident model, in either mode.
    let req = http::Request::post(format!(
        "http://{}{}",
        server.addr(),
        protocol::infer_path("other")
    ))
    .header("x-model-id", "other")
    .header("x-request-kind", "update")
    .body(Full::from("{}"))
    .unwrap();
    let rsp = tokio::time::timeout(BOUND, client.request(req))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rsp.status(), 200);
}

#[tokio::test]
async fn concurrent_load_calls_share_one_load_and_are_counted() {
    let server = ModelServer::start("node-0", explicit().build().unwrap())
        .await
        .unwrap();
    let client = client();
    server.set_fault(Some(Fault::LoadHangs));
    let calls: Vec<_> = (0..2)
        .map(|_| {
            let client = client.clone();
            let uri = format!("http://{}{}", server.addr(), protocol::load_path("llama"));
            tokio::spawn(async move {
                let req = http::Request::post(uri).body(Full::default()).unwrap();
                client.request(req).await.unwrap().status().as_u16()
            })
        })
        .collect();
    let stats = stats_until(&server, |s| s.load_calls == 2).await;
    assert_eq!(
        stats.loads_started, 1,
        "the second call waits for the first's load"
    );
    assert_eq!(
        stats.max_concurrent_loads_per_model, 2,
        "both calls in flight"
    );
    assert_eq!(
        index(&client, &server, "{}").await,
        format!("[{}]", state("llama", "LOADING", ""))
    );
    let (status, _, body) = infer(&client, &server, "llama").await;
    assert_eq!(status, 404, "loading is not loaded");
    assert_eq!(
        body,
        r#"{"error":"Request for unknown model: 'llama' has no available versions"}"#
    );

    server.set_fault(None);
    for call in calls {
        let status = tokio::time::timeout(BOUND, call).await.unwrap().unwrap();
        assert_eq!(status, 200);
    }
    assert_eq!(
        index(&client, &server, "{}").await,
        format!("[{}]", ready("llama"))
    );
    assert_eq!(infer(&client, &server, "llama").await.0, 200);
    let stats = server.stats();
    assert_eq!((stats.loads_started, stats.loads_failed), (1, 0));
    assert_eq!(
        stats.max_concurrent_loads_per_model, 2,
        "a maximum over the run"
    );
}

#[tokio::test]
async fn unload_eviction_and_the_index_of_a_repository() {
    let config = explicit()
        .resident_slots(1)
        .repository(["a", "b", "c"])
        .build()
        .unwrap();
    let server = ModelServer::start("node-0", config).await.unwrap();
    let client = client();
    let never = |m: &str| format!(r#"{{"name":"{m}"}}"#);
    assert_eq!(
        index(&client, &server, "").await,
        format!("[{},{},{}]", never("a"), never("b"), never("c")),
        "every repository model, none loaded"
    );
    assert_eq!(
        post(&client, &server, &protocol::load_path("a"), "")
            .await
            .0,
        200
    );
    assert_eq!(
        index(&client, &server, "{}").await,
        format!("[{},{},{}]", ready("a"), never("b"), never("c"))
    );
    // One slot: loading "b" evicts "a".
    assert_eq!(
        post(&client, &server, &protocol::load_path("b"), "")
            .await
            .0,
        200
    );
    assert_eq!(
        index(&client, &server, "{}").await,
        format!(
            "[{},{},{}]",
            state("a", "UNAVAILABLE", "unloaded"),
            ready("b"),
            never("c")
        )
    );
    assert_eq!(
        index(&client, &server, r#"{"ready":true}"#).await,
        format!("[{}]", ready("b"))
    );
    assert_eq!(server.stats().evictions, 1);
    let (status, _, body) = infer(&client, &server, "a").await;
    assert_eq!(status, 404);
    assert!(body.contains("has no available versions"), "{body}");

    // Unload: 200, and 200 again for a model no longer resident (Triton).
    let unload = protocol::unload_path("b");
    assert_eq!(
        post(&client, &server, &unload, "").await,
        (200, String::new())
    );
    assert_eq!(
        post(&client, &server, &unload, "").await,
        (200, String::new())
    );
    assert_eq!(index(&client, &server, r#"{"ready":true}"#).await, "[]");
    let stats = server.stats();
    assert_eq!((stats.unloads, stats.evictions), (1, 1));
    assert!(server.resident_models().is_empty());

    // Outside the repository: 404, no load.
    let (status, body) = post(&client, &server, &protocol::load_path("zzz"), "").await;
    assert_eq!(status, 404);
    assert_eq!(
        body,
        r#"{"error":"failed to load 'zzz', failed to poll from model repository"}"#
    );
    assert_eq!(infer(&client, &server, "zzz").await.0, 404);
    // Bad input: 400, never a panic.
    let (status, body) = post(&client, &server, &protocol::load_path("c"), "{not json").await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = post(&client, &server, "/v2/repository/models/a%20b/load", "").await;
    assert_eq!(status, 400, "decoded, an invalid model ID: {body}");
    let stats = server.stats();
    assert_eq!((stats.load_calls, stats.loads_started), (5, 2));
}

#[tokio::test]
async fn failing_loads_and_faults_on_the_repository_api() {
    let server = ModelServer::start("node-0", explicit().build().unwrap())
        .await
        .unwrap();
    let client = client();
    server.set_fault(Some(Fault::LoadFails));
    let (status, body) = post(&client, &server, &protocol::load_path("m"), "").await;
    assert_eq!(status, 400);
    assert_eq!(
        body,
        r#"{"error":"load failed for model 'm': simulated load failure"}"#
    );
    let lora = r#"{"lora_name":"m","lora_path":"/a"}"#;
    let (status, body) = post(&client, &server, protocol::LOAD_LORA_PATH, lora).await;
    assert_eq!(status, 400);
    assert!(body.contains(r#""type":"BadRequestError""#), "{body}");
    let stats = server.stats();
    assert_eq!((stats.loads_started, stats.loads_failed), (2, 2));
    assert!(
        server.resident_models().is_empty(),
        "a failed load leaves nothing"
    );
    assert_eq!(infer(&client, &server, "m").await.0, 404);

    server.set_fault(Some(Fault::Unavailable));
    let before = server.stats().unavailable;
    assert_eq!(
        post(&client, &server, &protocol::load_path("m"), "")
            .await
            .0,
        503
    );
    assert_eq!(
        post(&client, &server, &protocol::unload_path("m"), "")
            .await
            .0,
        503
    );
    assert_eq!(
        post(&client, &server, protocol::LOAD_LORA_PATH, lora)
            .await
            .0,
        503
    );
    assert_eq!(server.stats().unavailable, before + 3);

    server.set_fault(None);
    assert_eq!(
        post(&client, &server, &protocol::load_path("m"), "")
            .await
            .0,
        200
    );
    assert_eq!(infer(&client, &server, "m").await.0, 200);
    // A load whose model is unloaded before it ends fails.
    server.set_fault(Some(Fault::LoadHangs));
    let uri = format!("http://{}{}", server.addr(), protocol::load_path("n"));
    let call = {
        let client = client.clone();
        tokio::spawn(async move {
            let req = http::Request::post(uri).body(Full::default()).unwrap();
            client.request(req).await.unwrap().status().as_u16()
        })
    };
    stats_until(&server, |s| s.loads_started == 4).await;
    assert_eq!(
        post(&client, &server, &protocol::unload_path("n"), "")
            .await
            .0,
        200
    );
    server.set_fault(None);
    assert_eq!(
        tokio::time::timeout(BOUND, call).await.unwrap().unwrap(),
        400
    );
    let stats = server.stats();
    assert_eq!((stats.loads_failed, stats.unloads), (3, 1));
    assert_eq!(server.resident_models(), ["m"]);
}

#[tokio::test]
async fn the_auto_load_mode_refuses_model_control() {
    let config = ServerConfig::builder()
        .cold_load(Duration::from_millis(20))
        .inference(InferenceTimes::new(0, 1, 2).unwrap())
        .repository(["known"])
        .build()
        .unwrap();
    let server = ModelServer::start("node-0", config).await.unwrap();
    let client = client();
    let (status, body) = post(&client, &server, &protocol::load_path("known"), "").await;
    assert_eq!(status, 503);
    assert_eq!(
        body,
        r#"{"error":"explicit model load / unload is not allowed if polling is enabled"}"#
    );
    let lora = r#"{"lora_name":"known","lora_path":"/a"}"#;
    assert_eq!(
        post(&client, &server, protocol::LOAD_LORA_PATH, lora)
            .await
            .0,
        404
    );
    // Requests load their model, within the repository only.
    assert_eq!(infer(&client, &server, "known").await.0, 200);
    assert_eq!(infer(&client, &server, "unknown").await.0, 404);
    let stats = server.stats();
    assert_eq!((stats.cold_loads, stats.loads_started), (1, 0));
    assert_eq!((stats.not_found, stats.load_calls), (1, 2));
}

#[tokio::test]
async fn a_load_goes_on_when_its_caller_hangs_up() {
    let server = ModelServer::start("node-0", explicit().build().unwrap())
        .await
        .unwrap();
    let client = client();
    server.set_fault(Some(Fault::LoadHangs));
    let uri = format!("http://{}{}", server.addr(), protocol::load_path("m"));
    let call = {
        let client = client.clone();
        tokio::spawn(async move {
            let req = http::Request::post(uri).body(Full::default()).unwrap();
            let _ = client.request(req).await;
        })
    };
    stats_until(&server, |s| s.loads_started == 1).await;
    call.abort();
    let _ = call.await;
    server.set_fault(None);
    // The load ends on its own: this call finds it loaded or waits for it.
    assert_eq!(
        post(&client, &server, &protocol::load_path("m"), "")
            .await
            .0,
        200
    );
    assert_eq!(infer(&client, &server, "m").await.0, 200);
    let stats = server.stats();
    assert_eq!((stats.load_calls, stats.loads_started), (2, 1));
}
