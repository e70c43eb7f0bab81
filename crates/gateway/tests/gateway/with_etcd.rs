//! Two gateways (the gateway's app, twice, on 127.0.0.1) sharing
//! one real etcd (`etcd.rs`), the backends simulated model servers
//! registered by the sidecar's code (`etcd-register`'s, in
//! this process): a request through either gateway reaches a registered
//! backend, both gateways compute the same owners for every model, a
//! backend whose registration is dropped leaves both within its lease's
//! TTL (and one deregistered leaves at once), and the resident models the
//! sidecar reads from its server appear in its record. Every wait is on a
//! condition, bounded by a deadline (the flags' unit tests are the
//! library's: `src/register/args/tests.rs`).

use crate::app;
use crate::args;
use crate::etcd;
use crate::gateway;
use crate::sidecar;

use std::time::Duration;

use tokio::time::Instant;
use tower_model_balance::backend::BackendId;
use tower_model_balance::discover::etcd::decode_record;
use tower_model_balance::route::ModelId;
use tower_model_balance_sim::{protocol, ModelServer, ServerConfig};

use app::{Config, EtcdMembers};
use etcd::EtcdServer;
use gateway::Running;
use sidecar::Sidecar;

const COMPLETION: &str = r#"{"model": "llama-3-8b", "prompt": "hi"}"#;

/// Starts etcd; `None` (the test is skipped, said on stderr) where it is
/// not installed, outside CI.
async fn etcd() -> Option<EtcdServer> {
    tokio::task::spawn_blocking(EtcdServer::start)
        .await
        .unwrap()
}

/// A simulated server and its sidecar, registered under `prefix` with a
/// lease of `ttl` seconds, its resident models read every 50 ms: the
/// sidecar's own flags, parsed as its command line is.
async fn backend(etcd: &EtcdServer, prefix: &str, name: &str, ttl: u64) -> (ModelServer, Sidecar) {
    let server = ModelServer::start(name, ServerConfig::default())
        .await
        .unwrap();
    let flags = [
        "--etcd".to_string(),
        etcd.client_url(),
        "--prefix".into(),
        prefix.into(),
        "--id".into(),
        name.into(),
        "--address".into(),
        format!("http://{}", server.addr()),
        "--ttl".into(),
        ttl.to_string(),
        "--interval".into(),
        "50".into(),
    ];
    let args = args::Args::parse(flags).unwrap();
    (server, Sidecar::start(&args).await.unwrap())
}

/// A gateway whose backends are the records under `prefix`.
async fn gateway(etcd: &EtcdServer, prefix: &str) -> Running {
    let mut config = Config::new(Vec::new());
    config.etcd = Some(EtcdMembers::new(vec![etcd.client_url()], prefix.into()));
    config.residency_header = Some(protocol::RESIDENT_MODELS_HEADER);
    // The simulated servers load a model when a request names it.
    config.placement = false;
    gateway::serve(config, Vec::new()).await
}

/// The backends `gw` routes over, sorted.
fn members(gw: &Running) -> Vec<String> {
    let mut ids: Vec<String> = gw
        .handle
        .backends()
        .iter()
        .map(|b| b.id.to_string())
        .collect();
    ids.sort();
    ids
}

/// Waits until every gateway routes over exactly `want`, checking every
/// 5 ms; how long that took. Fails, never hangs, past `within`.
async fn until_members(gws: &[&Running], want: &[&str], within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        if gws.iter().all(|gw| members(gw) == want) {
            return start.elapsed();
        }
        let seen: Vec<Vec<String>> = gws.iter().map(|gw| members(gw)).collect();
        assert!(
            start.elapsed() < within,
            "the gateways route over {seen:?}, not {want:?}, after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The backend that served `reply` (the simulator's header).
fn served_by(reply: &gateway::Reply) -> &str {
    reply.headers[protocol::BACKEND_HEADER].to_str().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_one_etcd_reach_its_backends_and_agree_on_every_owner() {
    let Some(etcd) = etcd().await else { return };
    let prefix = "/gateway-etcd/agree/";
    let mut fleet = Vec::new();
    for i in 0..3 {
        fleet.push(backend(&etcd, prefix, &format!("gpu-{i}"), 10).await);
    }
    let (a, b) = (gateway(&etcd, prefix).await, gateway(&etcd, prefix).await);
    let all = ["gpu-0", "gpu-1", "gpu-2"];
    until_members(&[&a, &b], &all, Duration::from_secs(10)).await;

    // The same owners for each of 10 000 models, and the fleet's share of
    // them: every backend owns some (the ring spans all three, in both).
    let mut first_owners = std::collections::BTreeMap::<String, usize>::new();
    for m in 0..10_000 {
        let model = ModelId::new(&format!("tenant-{}/model-{m}", m % 7)).unwrap();
        let (ours, theirs) = (a.handle.owners(&model), b.handle.owners(&model));
        assert!(!ours.is_empty(), "{model} has no owner");
        assert_eq!(ours, theirs, "the gateways disagree on {model}'s owners");
        *first_owners.entry(ours[0].to_string()).or_default() += 1;
    }
    assert_eq!(first_owners.len(), 3, "{first_owners:?}");
    assert!(
        first_owners.values().all(|&n| n > 1_000),
        "{first_owners:?}"
    );

    // A request through each gateway reaches the model's owner.
    let owner = a.handle.owners(&ModelId::new("llama-3-8b").unwrap())[0].to_string();
    for gw in [&a, &b] {
        let reply = gw.post("/v1/completions", COMPLETION).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(served_by(&reply), owner);
    }
    let work: Vec<u64> = fleet.iter().map(|(s, _)| s.stats().work).collect();
    assert_eq!(work.iter().sum::<u64>(), 2, "{work:?}");
    let counters = a.etcd.as_ref().unwrap();
    assert_eq!(counters.stats().snapshots, 1, "{counters:?}");
    assert_eq!(counters.stats().stale_events, 0, "{counters:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_leaves_both_gateways_within_its_ttl_or_at_once_when_deregistered() {
    let Some(etcd) = etcd().await else { return };
    let prefix = "/gateway-etcd/leave/";
    // etcd's shortest lease: 1.5 × its election timeout (1 s), rounded up.
    let ttl = Duration::from_secs(2);
    let (_kept_serving, crashed) = backend(&etcd, prefix, "gpu-0", ttl.as_secs()).await;
    let (_server, stays) = backend(&etcd, prefix, "gpu-1", ttl.as_secs()).await;
    let (a, b) = (gateway(&etcd, prefix).await, gateway(&etcd, prefix).await);
    until_members(&[&a, &b], &["gpu-0", "gpu-1"], Duration::from_secs(10)).await;

    // The sidecar dies (its registration dropped, not revoked): no more
    // renewals (its tracker stops with it). Its server still answers, so only the record can take
    // it out. The lease expires at most a TTL after the last renewal;
    // etcd looks for expired leases every 500 ms.
    drop(crashed);
    let left = until_members(&[&a, &b], &["gpu-1"], ttl + Duration::from_secs(10)).await;
    eprintln!("gpu-0 left both gateways {left:?} after its sidecar died (TTL {ttl:?})");
    assert!(
        left <= ttl + Duration::from_secs(2),
        "gpu-0 left {left:?} after its sidecar died, past its TTL of {ttl:?} (+ 2 s); etcd's log:\n{}",
        etcd.log_tail()
    );
    for gw in [&a, &b] {
        let reply = gw.post("/v1/completions", COMPLETION).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(served_by(&reply), "gpu-1");
    }

    // Deregistered (the lease revoked): gone from both well within the TTL.
    stays.stop().await.unwrap();
    let left = until_members(&[&a, &b], &[], Duration::from_millis(500)).await;
    eprintln!("gpu-1 left both gateways {left:?} after it deregistered");
    let reply = a.post("/v1/completions", COMPLETION).await;
    assert_eq!(reply.status, 503, "{}", reply.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_models_a_server_loads_appear_in_its_record() {
    let Some(etcd) = etcd().await else { return };
    let prefix = "/gateway-etcd/residency/";
    let (server, sidecar) = backend(&etcd, prefix, "gpu-0", 10).await;
    let gw = gateway(&etcd, prefix).await;
    until_members(&[&gw], &["gpu-0"], Duration::from_secs(10)).await;
    let mut client = etcd_client::Client::connect([etcd.client_url()], None)
        .await
        .unwrap();
    let key = format!("{prefix}gpu-0");
    let record = |kvs: &[etcd_client::KeyValue]| {
        let id = BackendId::new("gpu-0").unwrap();
        decode_record(id, kvs[0].value()).unwrap()
    };
    let before = client.get(key.as_str(), None).await.unwrap();
    assert!(record(before.kvs()).resident_models().is_empty());

    // A request loads the model on the server; the sidecar reads the
    // server's repository index and writes the record again, which the
    // watch below sees.
    let options = etcd_client::WatchOptions::new()
        .with_start_revision(before.header().unwrap().revision() + 1);
    let mut events = client.watch(key.as_str(), Some(options)).await.unwrap();
    let reply = gw.post("/v1/completions", COMPLETION).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(server.resident_models(), ["llama-3-8b"]);
    let llama = ModelId::new("llama-3-8b").unwrap();
    let written = async {
        while let Some(message) = events.message().await.unwrap() {
            for event in message.events() {
                let Some(kv) = event.kv() else { continue };
                if record(std::slice::from_ref(kv)).resident_models() == [llama.clone()] {
                    return;
                }
            }
        }
        panic!("the watch ended");
    };
    tokio::time::timeout(Duration::from_secs(5), written)
        .await
        .expect("the record lists the loaded model within 5 s");
    assert_eq!(sidecar.registration.meta().await.resident_models(), [llama]);
}
