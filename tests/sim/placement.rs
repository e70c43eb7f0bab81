//! The balancer's on-demand placement (`KServeV2Loader`) against real
//! simulated servers in explicit mode on 127.0.0.1: the servers' own
//! counters show one load per (backend, model) for a herd. Driven by
//! counts, never by sleeping.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use tower::discover::ServiceList;
use tower::ServiceExt;
use tower_model_balance::backend::{Backend, BackendId, BackendMeta};
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
use tower_model_balance::endpoint::{Origin, SetOrigin};
use tower_model_balance::placement::{KServeV2Loader, PlacementConfig};
use tower_model_balance_sim::{protocol, InferenceTimes, ModelServer, ServerConfig};

type Endpoint = SetOrigin<Client<HttpConnector, Full<Bytes>>>;

const REPOSITORY: [&str; 4] = ["m1", "m2", "m3", "m4"];

async fn servers(n: usize) -> Vec<ModelServer> {
    let config = ServerConfig::builder()
        .explicit_load(true)
        .repository(REPOSITORY)
        .cold_load(Duration::from_millis(50))
        .inference(InferenceTimes::new(0, 1, 2).unwrap())
        .build()
        .unwrap();
    let mut servers = Vec::new();
    for i in 0..n {
        servers.push(
            ModelServer::start(&format!("node-{i}"), config.clone())
                .await
                .unwrap(),
        );
    }
    servers
}

fn balancer(servers: &[ModelServer]) -> ModelBalancer<Endpoint> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let backends: Vec<_> = servers
        .iter()
        .map(|s| {
            let origin = format!("http://{}", s.addr());
            let endpoint = SetOrigin::new(client.clone(), &origin).unwrap();
            let meta = BackendMeta::new(BackendId::new(s.name()).unwrap())
                .with_address(Origin::http(s.addr()))
                .with_model_slots(5)
                .unwrap();
            Backend::with_meta(meta, endpoint)
        })
        .collect();
    let config = BalanceConfig::builder().owners(1).build().unwrap();
    ModelBalancer::new(ServiceList::new(backends), config).unwrap()
}

async fn infer(balancer: &ModelBalancer<Endpoint>, model: &str) -> u16 {
    let req = http::Request::post(protocol::infer_path(model))
        .header("x-model-id", model)
        .body(Full::from("{}"))
        .unwrap();
    let rsp = tokio::time::timeout(Duration::from_secs(10), balancer.clone().oneshot(req))
        .await
        .expect("answered within 10 s")
        .unwrap();
    let status = rsp.status().as_u16();
    rsp.into_body().collect().await.unwrap();
    status
}

#[tokio::test]
async fn a_herd_for_a_cold_model_makes_one_load_call_per_backend_and_model() {
    let servers = servers(3).await;
    let balancer = balancer(&servers);
    let policy = PlacementConfig::builder()
        .load_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let _task = balancer
        .handle()
        .enable_placement(KServeV2Loader::default(), policy)
        .unwrap();
    let herd: Vec<_> = (0..50)
        .map(|_| {
            let balancer = balancer.clone();
            tokio::spawn(async move { infer(&balancer, "m1").await })
        })
        .collect();
    for request in herd {
        assert_eq!(request.await.unwrap(), 200);
    }
    let stats: Vec<_> = servers.iter().map(ModelServer::stats).collect();
    assert_eq!(stats.iter().map(|s| s.loads_started).sum::<u64>(), 1);
    assert_eq!(stats.iter().map(|s| s.load_calls).sum::<u64>(), 1);
    assert!(stats.iter().all(|s| s.max_concurrent_loads_per_model <= 1));
    assert_eq!(stats.iter().map(|s| s.not_found).sum::<u64>(), 0);
    // Warm now: no more loads.
    for _ in 0..5 {
        assert_eq!(infer(&balancer, "m1").await, 200);
    }
    assert_eq!(servers.iter().map(|s| s.stats().load_calls).sum::<u64>(), 1);
}

#[tokio::test]
async fn the_lora_loader_speaks_vllms_adapter_api() {
    use tower_model_balance::health::probe::{ProbeClient, ProbeTarget};
    use tower_model_balance::placement::{ModelLoader, VllmLoraLoader};
    use tower_model_balance::route::ModelId;

    let server = &servers(1).await[0];
    let target = ProbeTarget::new(
        BackendId::new(server.name()).unwrap(),
        Origin::http(server.addr()),
    );
    let (m1, m2) = (ModelId::new("m1").unwrap(), ModelId::new("m2").unwrap());
    let loader = VllmLoraLoader::new(
        ProbeClient::new(),
        [
            (m1.clone(), "/adapters/m1".to_string()),
            (m2.clone(), "/adapters/m2".to_string()),
        ],
    );
    let repository = loader.repository(&target).await.unwrap();
    assert_eq!(repository.known.len(), 2, "the configured adapters");
    assert!(repository.resident.is_empty());

    loader.load(&target, &m1).await.unwrap();
    loader
        .load(&target, &m1)
        .await
        .expect("already loaded is loaded");
    let repository = loader.repository(&target).await.unwrap();
    assert_eq!(repository.resident, vec![m1.clone()]);
    loader
        .unload(&target, &m2)
        .await
        .expect("not loaded is unloaded");
    loader.unload(&target, &m1).await.unwrap();
    assert!(loader
        .repository(&target)
        .await
        .unwrap()
        .resident
        .is_empty());
    let unknown = ModelId::new("no-such-adapter").unwrap();
    assert!(
        loader.load(&target, &unknown).await.is_err(),
        "no path given"
    );
    assert_eq!(server.stats().loads_started, 1);
}
