//! The stack against model servers nobody here wrote: MLServer 1.7.1 in
//! explicit model-control mode (nothing loaded until the gateway loads it)
//! and KServe's own Python model server, real processes on 127.0.0.1 from
//! the virtual environments `.ci/run` makes, with the tiny runtime of
//! `tests/mlserver/` (loads take 0.5 s, inferences 10 ms). The gateway
//! example's app is what the requests go through; a real client
//! (tritonclient) drives one test. No sleeps but the bounded wait for a
//! process to come up: every other wait is on an answer or a count.
//!
//! Each test prints its figures (`real-servers: …`); under `CI` a missing
//! server fails the test instead of skipping it.

#[path = "../examples/gateway/app.rs"]
#[allow(dead_code)] // The example uses all of it; the tests, part.
mod app;
#[path = "support/lcg.rs"]
mod lcg;
#[path = "support/mlserver.rs"]
mod mlserver;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tower::util::rng::Rng;
use tower_model_balance::backend::BackendId;
use tower_model_balance::balance::BalancerHandle;
use tower_model_balance::endpoint::Origin;
use tower_model_balance::route::ModelId;

use app::{Config, Gateway};
use lcg::Lcg;
use mlserver::{Fleet, Kind, Models};

/// One real-server test at a time: each starts its own processes, and on
/// 2 cores the measured figures (the added p50 above all) must not pay for
/// another test's servers starting beside them.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The gateway serving on loopback in front of a fleet.
struct Running {
    addr: SocketAddr,
    handle: BalancerHandle,
    /// Its probes and placement live as long as it.
    _gateway: Arc<Gateway>,
    server: JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Starts the gateway in front of `fleet`: each server's HTTP origin, its
/// metrics origin, probes once a second; `edit` changes the config first.
async fn gateway(fleet: &Fleet, edit: impl FnOnce(&mut Config)) -> Running {
    let backends: Vec<_> = fleet
        .servers
        .iter()
        .map(|s| (BackendId::new(&s.name).unwrap(), Origin::http(s.http)))
        .collect();
    let metrics = fleet
        .servers
        .iter()
        .map(|s| (BackendId::new(&s.name).unwrap(), Origin::http(s.metrics)))
        .collect();
    let mut config = Config::new(backends);
    config.metrics_origins = metrics;
    edit(&mut config);
    let gateway = Arc::new(Gateway::new(config).unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = gateway.router.clone();
    let server = tokio::spawn(async move {
        app::serve(listener, router, std::future::pending())
            .await
            .unwrap();
    });
    Running {
        addr,
        handle: gateway.handle.clone(),
        _gateway: gateway,
        server,
    }
}

/// Zipf(1.1) model indices over `n` models, from a seeded LCG.
fn zipf(n: usize, count: usize, seed: u64) -> Vec<usize> {
    let weights: Vec<f64> = (1..=n).map(|r| 1.0 / (r as f64).powf(1.1)).collect();
    let total: f64 = weights.iter().sum();
    let mut rng = Lcg(seed);
    (0..count)
        .map(|_| {
            let mut u = (rng.next_u64() as f64 / (1u64 << 53) as f64) * total;
            weights
                .iter()
                .position(|w| {
                    u -= w;
                    u < 0.0
                })
                .unwrap_or(n - 1)
        })
        .collect()
}

/// What one request got.
#[derive(Debug, Clone)]
struct Sent {
    model: usize,
    status: u16,
    at: Instant,
    body: String,
}

/// Sends `POST /v2/models/m{i}/infer` for each model index of `plan` to
/// `addr`, `concurrency` at once over kept-alive connections; every
/// answer, in the order sent.
async fn drive(addr: SocketAddr, plan: &[usize], concurrency: usize) -> Vec<Sent> {
    let next = Arc::new(AtomicUsize::new(0));
    let plan = Arc::new(plan.to_vec());
    let out = Arc::new(Mutex::new(vec![None; plan.len()]));
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (next, plan, out) = (next.clone(), plan.clone(), out.clone());
        workers.push(tokio::spawn(async move {
            let client = mlserver::client();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&model) = plan.get(i) else {
                    return;
                };
                let path = format!("/v2/models/m{model}/infer");
                let start = Instant::now();
                let (status, body) =
                    mlserver::post(&client, addr, &path, mlserver::infer_body(i)).await;
                let sent = Sent {
                    model,
                    status,
                    at: start,
                    body,
                };
                out.lock().unwrap()[i] = Some(sent);
            }
        }));
    }
    for worker in workers {
        worker.await.unwrap();
    }
    let out = std::mem::take(&mut *out.lock().unwrap());
    out.into_iter()
        .map(|s| s.expect("every request answered"))
        .collect()
}

fn ok_share(sent: &[Sent]) -> f64 {
    sent.iter().filter(|s| s.status == 200).count() as f64 / sent.len().max(1) as f64
}

/// A sample of the failures, for the assertion messages.
fn failures(sent: &[Sent]) -> String {
    let mut by_status = std::collections::BTreeMap::<u16, (usize, String)>::new();
    for s in sent.iter().filter(|s| s.status != 200) {
        let entry = by_status.entry(s.status).or_insert((0, s.body.clone()));
        entry.0 += 1;
    }
    format!("{by_status:?}")
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

/// MLServer's Zipf workload through the gateway: the acceptance.
///
/// Four MLServer instances, explicit mode, nothing preloaded, 12 models;
/// 2,000 Zipf requests at 8 at once; then the added p50 over a direct call
/// on kept-alive connections; then one server killed and restarted empty
/// under traffic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mlserver_fleet_in_explicit_mode_through_the_gateway() {
    let _serial = SERIAL.lock().await;
    let models = Models::new(12, Duration::from_millis(500), Duration::from_millis(10));
    let Some(mut fleet) = Fleet::start(Kind::MlServer, 4, models).await else {
        return;
    };
    let gw = gateway(&fleet, |_| {}).await;

    // 1. 2,000 Zipf requests, 8 at once, nothing loaded at the start.
    let started = Instant::now();
    let sent = drive(gw.addr, &zipf(12, 2_000, 1), 8).await;
    let took = started.elapsed();
    let ok = ok_share(&sent);
    let stats = gw.handle.stats();
    let placement = gw.handle.placement_stats().unwrap();
    eprintln!(
        "real-servers: mlserver x4, 12 models, 2000 Zipf requests at 8: {:.2}% ok in {:.1} s; \
         routed {} resident owner, {} cold owner, {} spilled; {} loads, {} unloads, {} load failures; \
         {} breaker trips, {} pair breaker trips",
        ok * 100.0,
        took.as_secs_f64(),
        stats.resident_owner,
        stats.cold_owner,
        stats.spill,
        placement.loads,
        placement.unloads,
        placement.load_failures,
        gw.handle.breaker_trips(),
        gw.handle.pair_breaker_trips(),
    );
    assert!(ok >= 0.995, "{:.2}% ok: {}", ok * 100.0, failures(&sent));
    assert_eq!(
        gw.handle.breaker_trips(),
        0,
        "every server is up: {:?}",
        gw.handle.backends()
    );
    assert!(
        gw.handle.backends().iter().all(|b| !b.ejected),
        "nobody ejected: {:?}",
        gw.handle.backends()
    );

    // 2. No model on more servers than its owners plus one.
    let mut copies = vec![0usize; 12];
    for server in &fleet.servers {
        for name in server.ready_models().await {
            copies[name[1..].parse::<usize>().unwrap()] += 1;
        }
    }
    for (i, &n) in copies.iter().enumerate() {
        let owners = gw
            .handle
            .owners(&ModelId::new(&format!("m{i}")).unwrap())
            .len();
        assert!(
            n <= owners + 1,
            "m{i} loaded on {n} servers, {owners} owners: {copies:?}"
        );
    }
    eprintln!("real-servers: copies loaded per model (m0..m11): {copies:?}");

    // 3. The gateway's added p50 over a direct call, kept-alive, one at a
    //    time, interleaved: a model and a server that holds it.
    let (server, model) = {
        let mut found = None;
        for (i, s) in fleet.servers.iter().enumerate() {
            if let Some(m) = s.ready_models().await.first() {
                found = Some((i, m.clone()));
                break;
            }
        }
        found.expect("some model is loaded")
    };
    let direct_addr = fleet.servers[server].http;
    let client = mlserver::client();
    let path = format!("/v2/models/{model}/infer");
    let (mut direct, mut through) = (Vec::new(), Vec::new());
    for i in 0..300 {
        for (addr, out) in [(direct_addr, &mut direct), (gw.addr, &mut through)] {
            let start = Instant::now();
            let (status, body) =
                mlserver::post(&client, addr, &path, mlserver::infer_body(i)).await;
            assert_eq!(status, 200, "{body}");
            out.push(start.elapsed());
        }
    }
    let (direct, through) = (median(direct), median(through));
    let added = through.saturating_sub(direct);
    eprintln!(
        "real-servers: p50 direct {:.2} ms, through the gateway {:.2} ms: +{:.2} ms",
        direct.as_secs_f64() * 1e3,
        through.as_secs_f64() * 1e3,
        added.as_secs_f64() * 1e3
    );
    assert!(added <= Duration::from_millis(2), "added p50 {added:?}");

    // 4. A server killed under traffic and restarted empty.
    let victim = 0;
    let victim_id = BackendId::new(&fleet.servers[victim].name).unwrap();
    let owned: Vec<usize> = (0..12)
        .filter(|i| {
            gw.handle
                .owners(&ModelId::new(&format!("m{i}")).unwrap())
                .contains(&victim_id)
        })
        .collect();
    fleet.servers[victim].kill();
    let down = drive(gw.addr, &zipf(12, 500, 2), 8).await;
    fleet.servers[victim].restart().await;
    let back_at = Instant::now();
    let after = drive(gw.addr, &zipf(12, 1_500, 3), 8).await;
    let after_ok = ok_share(&after);
    let last_error = after
        .iter()
        .filter(|s| s.status != 200)
        .map(|s| s.at.saturating_duration_since(back_at))
        .max();
    // Its models serve again: each model it owns answers through the
    // gateway, and it holds models again.
    let reloaded = fleet.servers[victim].ready_models().await;
    eprintln!(
        "real-servers: killed {}: {:.2}% ok while down (500 requests: {}); restarted empty: \
         {:.2}% ok of the 1500 after ({} errors: {}, the last {:?} after it was back); it owns {owned:?}, \
         holds {reloaded:?} again; {} breaker trips",
        fleet.servers[victim].name,
        ok_share(&down) * 100.0,
        failures(&down),
        after_ok * 100.0,
        after.iter().filter(|s| s.status != 200).count(),
        failures(&after),
        last_error,
        gw.handle.breaker_trips(),
    );
    assert!(
        after_ok >= 0.99,
        "{:.2}% ok after restart: {}",
        after_ok * 100.0,
        failures(&after)
    );
    if let Some(last) = last_error {
        assert!(
            last <= Duration::from_secs(2),
            "errors until {last:?} after it was back"
        );
    }
    for &i in &owned {
        assert!(
            after.iter().any(|s| s.model == i && s.status == 200),
            "m{i} (owned by the restarted server) served again"
        );
    }
    // Back in rotation: once its breaker's open time has passed and its
    // probes answer, it loads what it owns again. Bounded: 60 rounds of
    // 100 requests.
    let mut rounds = 0;
    while fleet.servers[victim].ready_models().await.is_empty() {
        rounds += 1;
        assert!(
            rounds <= 60,
            "the restarted server never got a model back: {:?}",
            gw.handle.backends()
        );
        let more = drive(gw.addr, &zipf(12, 100, 10 + rounds), 8).await;
        assert!(ok_share(&more) >= 0.99, "{}", failures(&more));
    }
    eprintln!(
        "real-servers: the restarted server holds {:?} again {:.1} s after it was back ({rounds} rounds of 100 requests)",
        fleet.servers[victim].ready_models().await,
        back_at.elapsed().as_secs_f64()
    );
    drop(gw);
}

/// Runs `tests/mlserver/triton_client.py` (tritonclient from the MLServer
/// environment) against the gateway at `addr` with `args`; its output.
/// Panics if it fails.
async fn tritonclient(addr: SocketAddr, args: &[&str]) -> String {
    let python = mlserver::installed(Kind::MlServer)
        .expect("tritonclient is installed with MLServer")
        .with_file_name("python");
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mlserver/triton_client.py");
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python)
            .arg(script)
            .arg(addr.to_string())
            .args(args)
            .output()
            .expect("run python")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    eprint!("{stdout}");
    assert!(
        output.status.success(),
        "tritonclient failed: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// tritonclient, the real KServe v2 client, through the gateway in front
/// of two MLServer instances in explicit mode: server and model readiness
/// (the gateway loads the model on its owner), metadata, JSON tensors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tritonclient_through_the_gateway() {
    let _serial = SERIAL.lock().await;
    let models = Models::new(3, Duration::from_millis(200), Duration::from_millis(5));
    let Some(fleet) = Fleet::start(Kind::MlServer, 2, models).await else {
        return;
    };
    let gw = gateway(&fleet, |_| {}).await;
    let stdout = tritonclient(gw.addr, &["m0", "m1", "m2"]).await;
    assert_eq!(stdout.matches("JSON inference ok").count(), 3, "{stdout}");
    assert_eq!(gw.handle.breaker_trips(), 0);
}

/// KServe's own Python model server (every model loaded at start, no
/// repository index, metrics on its HTTP port): the same gateway, with
/// placement off, serves a Zipf workload, its probes keep every server in,
/// and a server killed under traffic is routed around.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kserve_servers_through_the_gateway() {
    let _serial = SERIAL.lock().await;
    let models = Models::new(6, Duration::from_millis(50), Duration::from_millis(10));
    let Some(mut fleet) = Fleet::start(Kind::KServe, 3, models).await else {
        return;
    };
    let gw = gateway(&fleet, |config| config.placement = false).await;
    let sent = drive(gw.addr, &zipf(6, 600, 7), 8).await;
    let ok = ok_share(&sent);
    eprintln!(
        "real-servers: kserve x3, 6 models, 600 Zipf requests at 8: {:.2}% ok; {} breaker trips; {:?}",
        ok * 100.0,
        gw.handle.breaker_trips(),
        gw.handle
            .backends()
            .iter()
            .map(|b| (b.id.to_string(), b.health, b.ejected))
            .collect::<Vec<_>>()
    );
    assert!(ok >= 0.995, "{:.2}% ok: {}", ok * 100.0, failures(&sent));
    assert_eq!(gw.handle.breaker_trips(), 0);
    assert!(
        gw.handle.backends().iter().all(|b| !b.ejected),
        "{:?}",
        gw.handle.backends()
    );
    // tritonclient's binary tensor extension, which KServe's server speaks,
    // passes through the gateway untouched.
    let stdout = tritonclient(gw.addr, &["--binary", "m0", "m4"]).await;
    assert_eq!(stdout.matches("binary inference ok").count(), 2, "{stdout}");
    // Metadata and readiness through the gateway, from an owner.
    let client = mlserver::client();
    let (status, body) = mlserver::get(&client, gw.addr, "/v2/models/m3/ready").await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = mlserver::get(&client, gw.addr, "/v2/health/ready").await;
    assert_eq!(status, 200);
    // One server killed: its requests go elsewhere (a refused connection
    // is retried on another backend; its breaker opens).
    fleet.servers[1].kill();
    let down = drive(gw.addr, &zipf(6, 600, 8), 8).await;
    let down_ok = ok_share(&down);
    eprintln!(
        "real-servers: kserve, one of 3 killed: {:.2}% ok of 600 ({})",
        down_ok * 100.0,
        failures(&down)
    );
    assert!(down_ok >= 0.99, "{}", failures(&down));
}

/// The crate's own client stack, as the README builds it — a hyper-util
/// client per backend under a timeout, the balancer with KServe v2 and
/// metrics probes and placement — with no gateway, against MLServer in
/// explicit mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_stack_against_mlserver() {
    let _serial = SERIAL.lock().await;
    use http_body_util::{BodyExt, Full};
    use tower::discover::ServiceList;
    use tower::{ServiceBuilder, ServiceExt};
    use tower_model_balance::balance::{Backend, BackendMeta, BalanceConfig, ModelBalancer};
    use tower_model_balance::endpoint::SetOrigin;
    use tower_model_balance::health::probe::{
        KServeV2, MetricNames, ProbeConfig, PrometheusMetrics,
    };
    use tower_model_balance::placement::{KServeV2Loader, PlacementPolicy};

    let models = Models::new(6, Duration::from_millis(200), Duration::from_millis(5));
    let Some(fleet) = Fleet::start(Kind::MlServer, 3, models).await else {
        return;
    };
    let client = mlserver::client();
    let backends: Vec<_> = fleet
        .servers
        .iter()
        .map(|s| {
            let meta = BackendMeta::new(BackendId::new(&s.name).unwrap())
                .with_address(Origin::http(s.http))
                .with_metrics_address(Origin::http(s.metrics));
            let endpoint = ServiceBuilder::new()
                .timeout(Duration::from_secs(30))
                .service(SetOrigin::to(client.clone(), Origin::http(s.http)));
            Backend::with_meta(meta, endpoint)
        })
        .collect();
    let config = BalanceConfig::builder().build().unwrap();
    let balancer = ModelBalancer::new(ServiceList::new(backends), config).unwrap();
    let handle = balancer.handle();
    let probes = ProbeConfig::builder()
        .interval(Duration::from_millis(500))
        .timeout(Duration::from_millis(400))
        .build()
        .unwrap();
    let _probes = handle.spawn_probes(
        (KServeV2::new(), PrometheusMetrics::new(MetricNames::vllm())),
        probes,
    );
    let _placement = handle
        .enable_placement(KServeV2Loader::new(), PlacementPolicy::default())
        .unwrap();
    // MLServer's own metrics (route templates in label values) parse.
    let target = tower_model_balance::health::probe::ProbeTarget::new(
        BackendId::new("metrics").unwrap(),
        Origin::http(fleet.servers[0].http),
    )
    .with_metrics_address(Origin::http(fleet.servers[0].metrics));
    let metrics = PrometheusMetrics::new(MetricNames::vllm());
    let report = tower_model_balance::health::probe::Prober::probe(&metrics, &target).await;
    assert!(report.is_ok(), "MLServer's /metrics: {report:?}");
    let plan = zipf(6, 400, 5);
    let mut ok = 0;
    for (i, &m) in plan.iter().enumerate() {
        let req = http::Request::post(format!("/v2/models/m{m}/infer"))
            .header("x-model-id", format!("m{m}"))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(mlserver::infer_body(i)))
            .unwrap();
        let response = balancer.clone().oneshot(req).await.unwrap();
        let status = response.status();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        if status == 200 {
            ok += 1;
        } else {
            eprintln!("m{m}: {status} {}", String::from_utf8_lossy(&body));
        }
    }
    let stats = handle.stats();
    eprintln!(
        "real-servers: client stack, mlserver x3, 400 Zipf requests one at a time: {ok} ok; \
         {} resident owner, {} cold owner, {} spilled; {:?}",
        stats.resident_owner,
        stats.cold_owner,
        stats.spill,
        handle.placement_stats()
    );
    assert!(ok >= 398, "{ok} of 400 ok");
    assert_eq!(handle.breaker_trips(), 0);
}

/// Models that cannot load, or fail every inference, against MLServer
/// through the gateway: their own requests fail (typed, at once once their
/// breakers are open), and nobody else's — no server is ejected, no
/// server's breaker opens, healthy models are served throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_models_do_not_take_the_fleet_down() {
    let _serial = SERIAL.lock().await;
    let models = Models::new(4, Duration::from_millis(100), Duration::from_millis(5))
        .with("unloadable", serde_json::json!({"fail_load": true}))
        .with("failing", serde_json::json!({"fail_predict": true}));
    let Some(fleet) = Fleet::start(Kind::MlServer, 3, models).await else {
        return;
    };
    let gw = gateway(&fleet, |_| {}).await;
    let client = mlserver::client();
    // Healthy traffic first: the retry budget (5% of requests) funds
    // retries only once there were requests (it has no floor), and MLServer
    // closes a connection after each 500 it answers, so a request sent on
    // one as it closes is retried elsewhere.
    let warm = drive(gw.addr, &zipf(4, 100, 8), 4).await;
    assert_eq!(ok_share(&warm), 1.0, "{}", failures(&warm));
    let (mut good, mut good_ok, mut bad_statuses) = (0, 0, Vec::new());
    let plan = zipf(4, 300, 9);
    for (i, &m) in plan.iter().enumerate() {
        // One request of a broken model for every two good ones.
        if i % 2 == 0 {
            let bad = ["unloadable", "failing"][i / 2 % 2];
            let path = format!("/v2/models/{bad}/infer");
            let (status, _) =
                mlserver::post(&client, gw.addr, &path, mlserver::infer_body(i)).await;
            bad_statuses.push(status);
        }
        let path = format!("/v2/models/m{m}/infer");
        let (status, body) = mlserver::post(&client, gw.addr, &path, mlserver::infer_body(i)).await;
        good += 1;
        if status == 200 {
            good_ok += 1;
        } else {
            let budget = gw._gateway.hedge.budget();
            eprintln!(
                "m{m}: {status} {body} (retries granted {}, refused {})",
                budget.granted(),
                budget.refused()
            );
        }
    }
    let (ready, _) = mlserver::get(&client, gw.addr, "/v2/health/ready").await;
    eprintln!(
        "real-servers: broken models: {good_ok} of {good} good requests ok; broken answered {:?}; \
         {} server breaker trips, {} pair trips, placement {:?}",
        {
            let mut counts = std::collections::BTreeMap::<u16, usize>::new();
            for s in &bad_statuses {
                *counts.entry(*s).or_default() += 1;
            }
            counts
        },
        gw.handle.breaker_trips(),
        gw.handle.pair_breaker_trips(),
        gw.handle.placement_stats(),
    );
    assert_eq!(good_ok, good, "healthy models are served throughout");
    assert!(
        bad_statuses.iter().all(|&s| s == 500 || s == 503),
        "{bad_statuses:?}"
    );
    assert_eq!(
        gw.handle.breaker_trips(),
        0,
        "no server's breaker: {:?}",
        gw.handle.backends()
    );
    assert!(
        gw.handle.backends().iter().all(|b| !b.ejected),
        "{:?}",
        gw.handle.backends()
    );
    assert!(
        gw.handle.pair_breaker_trips() >= 1,
        "the failing model's pairs trip"
    );
    assert_eq!(ready, 200);
}
