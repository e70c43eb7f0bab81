//! The crate's client stack against a model server nobody here wrote:
//! MLServer 1.7.1 in explicit model-control mode, real processes on
//! 127.0.0.1 from the virtual environment `.ci/run` makes, with the tiny
//! runtime of `tests/mlserver/` — the balancer with its probes and
//! placement over hyper-util clients, and no gateway (that is
//! `tests/real_servers.rs`). No sleeps but the bounded wait for a process
//! to come up.
//!
//! The test prints its figures (`real-servers: …`); under `CI` a missing
//! server fails the test instead of skipping it.

use std::time::Duration;

use tower_model_balance::backend::BackendId;
use tower_model_balance::endpoint::Origin;
use tower_model_balance_test_support::{mlserver, real_load};

use mlserver::{Fleet, Kind, Models};
use real_load::{zipf, SERIAL};

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
    use tower_model_balance::backend::{Backend, BackendMeta};
    use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
    use tower_model_balance::endpoint::SetOrigin;
    use tower_model_balance::health::probe::{
        KServeV2, MetricNames, ProbeClient, ProbeConfig, PrometheusMetrics,
    };
    use tower_model_balance::placement::{KServeV2Loader, PlacementConfig};

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
    let _probes = handle
        .spawn_probes(
            (
                KServeV2::default(),
                PrometheusMetrics::new(ProbeClient::new(), MetricNames::vllm()),
            ),
            probes,
        )
        .expect("inside a Tokio runtime");
    let _placement = handle
        .enable_placement(KServeV2Loader::default(), PlacementConfig::default())
        .unwrap();
    // MLServer's own metrics (route templates in label values) parse.
    let target = tower_model_balance::health::probe::ProbeTarget::new(
        BackendId::new("metrics").unwrap(),
        Origin::http(fleet.servers[0].http),
    )
    .with_metrics_address(Origin::http(fleet.servers[0].metrics));
    let metrics = PrometheusMetrics::new(ProbeClient::new(), MetricNames::vllm());
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
    assert_eq!(handle.stats().breaker_trips, 0);
}
