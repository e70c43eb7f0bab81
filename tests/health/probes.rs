//! Backend health inside the balancer, over mock backends on a paused
//! clock: active probes feeding health and residency, their concurrency,
//! and residency learned from answers.

use crate::health_fleet;
use crate::lcg;
use crate::nodes;

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tower::discover::ServiceList;
use tower::ServiceExt;
use tower_model_balance::balance::{BalanceConfig, ModelBalancer, ResidencyHeader};
use tower_model_balance::endpoint::Origin;
use tower_model_balance::health::probe::{
    ProbeConfig, ProbeError, ProbeReport, ProbeTarget, Prober,
};
use tower_model_balance::health::Ejection;
use tower_model_balance::route::ModelId;

use health_fleet::{balancer, id, nodes, EIGHT};
use lcg::Lcg;
use nodes::{request, Node};

/// A prober answering what the test set for each backend, counting probes.
#[derive(Clone)]
struct Scripted {
    probes: Arc<AtomicU64>,
    answer: fn(&ProbeTarget) -> Option<Result<ProbeReport, ProbeError>>,
}

impl Prober for Scripted {
    fn probe(
        &self,
        target: &ProbeTarget,
    ) -> impl std::future::Future<Output = Result<ProbeReport, ProbeError>> + Send + 'static {
        self.probes.fetch_add(1, Ordering::Relaxed);
        let answer = (self.answer)(target);
        async move {
            match answer {
                Some(answer) => answer,
                // Never answers: the runner's timeout fails it.
                None => std::future::pending().await,
            }
        }
    }
}

fn addressed(nodes: &[Node]) -> ServiceList<Vec<tower_model_balance::backend::Backend<Node>>> {
    ServiceList::new(
        nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let mut backend = n.backend();
                let origin = Origin::parse(&format!("http://127.0.0.1:{}", 9000 + i)).unwrap();
                backend.meta = backend.meta.with_address(origin);
                backend
            })
            .collect(),
    )
}

#[tokio::test(start_paused = true)]
async fn probes_feed_health_and_residency_and_stop_with_their_task() {
    let nodes = nodes(&["a", "b", "c", "d"]);
    let balancer =
        ModelBalancer::from_rng(addressed(&nodes), BalanceConfig::default(), Lcg(6)).unwrap();
    let handle = balancer.handle();
    let probes = Arc::new(AtomicU64::new(0));
    let prober = Scripted {
        probes: probes.clone(),
        answer: |t| match t.id.as_str() {
            "a" => Some(Ok(ready(false))),
            "b" => None,
            "c" => {
                let mut r = ready(true);
                r.resident_models = Some(vec![ModelId::new("llama").unwrap()]);
                r.load.requests_waiting = Some(40.0);
                Some(Ok(r))
            }
            _ => Some(Ok(ready(true))),
        },
    };
    let config = ProbeConfig::builder()
        .interval(Duration::from_secs(1))
        .timeout(Duration::from_millis(200))
        .jitter(0.0)
        .build()
        .unwrap();
    let task = handle
        .spawn_probes(prober, config)
        .expect("inside a Tokio runtime");
    tokio::time::sleep(Duration::from_secs(30)).await;
    let rounds = probes.load(Ordering::Relaxed) / 4;
    assert!((25..=31).contains(&rounds), "{rounds} rounds in 30 s");
    let health = |n| handle.health(&id(n)).unwrap();
    assert_eq!(
        health("a").ejected,
        Some(Ejection::Score),
        "not ready: {:?}",
        health("a")
    );
    assert!(health("b").error_rate > 0.9, "timed out: {:?}", health("b"));
    assert!(health("c").capacity < 0.2, "deep queue: {:?}", health("c"));
    assert!(handle.is_resident(&id("c"), &ModelId::new("llama").unwrap()));
    assert_eq!(health("d").score, 1.0);
    // At most the share is out: `b` stays in.
    assert_eq!(health("b").ejected, None);

    drop(task);
    let count = probes.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        probes.load(Ordering::Relaxed),
        count,
        "dropping the task stops it"
    );

    let hourly = ProbeConfig::builder()
        .interval(Duration::from_secs(3600))
        .build()
        .unwrap();
    let task = handle
        .spawn_probes(
            Scripted {
                probes: probes.clone(),
                answer: |_| Some(Ok(ProbeReport::default())),
            },
            hourly,
        )
        .expect("inside a Tokio runtime");
    tokio::time::sleep(Duration::from_millis(10)).await;
    drop((balancer, handle));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(
        task.is_finished(),
        "stops once the balancer is gone, not an hour later"
    );
}

#[tokio::test(start_paused = true)]
async fn a_probe_for_an_unknown_backend_is_refused() {
    let nodes = nodes(&["a"]);
    let balancer = balancer(&nodes, BalanceConfig::default(), 7);
    let report = ProbeReport::default();
    assert!(!balancer.handle().report_probe(&id("zz"), Ok(&report)));
    assert!(balancer.handle().report_probe(&id("a"), Ok(&report)));
    let err = ProbeError::Timeout;
    assert!(balancer.handle().report_probe(&id("a"), Err(&err)));
}

#[tokio::test(start_paused = true)]
async fn a_server_not_ready_because_it_is_loading_is_busy_not_sick() {
    let nodes = nodes(&["a", "b"]);
    let balancer = balancer(&nodes, BalanceConfig::default(), 7);
    let handle = balancer.handle();
    // MLServer answers 400 on readiness while a model loads; its index
    // lists the model LOADING.
    let mut loading = ready(false);
    loading.loading = true;
    let sick = ready(false);
    assert!(!loading.is_failure() && sick.is_failure());
    for _ in 0..10 {
        assert!(handle.report_probe(&id("a"), Ok(&loading)));
        assert!(handle.report_probe(&id("b"), Ok(&sick)));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let health = |n| handle.health(&id(n)).unwrap();
    assert_eq!(health("a").error_rate, 0.0, "busy: {:?}", health("a"));
    assert!(health("b").error_rate > 0.5, "sick: {:?}", health("b"));
}

/// A node that lists the models it holds in a response header.
#[derive(Clone)]
struct Listing;

impl tower::Service<http::Request<String>> for Listing {
    type Response = http::Response<String>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Request<String>) -> Self::Future {
        let rsp = http::Response::builder()
            .header("x-resident", "bert, llama ,not a model,")
            .body(String::new())
            .unwrap();
        std::future::ready(Ok(rsp))
    }
}

#[tokio::test(start_paused = true)]
async fn residency_is_learned_from_a_response_header() {
    let backends = [tower_model_balance::backend::Backend::new(id("a"), Listing)];
    let config = BalanceConfig::builder()
        .residency_header(ResidencyHeader::ResidentModels(
            http::HeaderName::from_static("x-resident"),
        ))
        .build()
        .unwrap();
    let balancer = ModelBalancer::new(ServiceList::new(backends), config).unwrap();
    let handle = balancer.handle();
    assert!(handle.set_resident_models(&id("a"), [&ModelId::new("old").unwrap()]));
    let rsp = balancer.oneshot(request("gpt", false)).await.unwrap();
    assert!(rsp.status().is_success());
    let resident = |m| handle.is_resident(&id("a"), &ModelId::new(m).unwrap());
    assert!(resident("bert") && resident("llama"), "listed");
    assert!(!resident("old"), "served before, not listed: evicted");
    assert!(
        resident("gpt"),
        "sent there and loading when the list was read: kept"
    );
}

/// A prober whose probes take 100 ms, counting how many run at once.
#[derive(Clone, Default)]
struct Slow {
    running: Arc<AtomicU64>,
    most: Arc<AtomicU64>,
    done: Arc<AtomicU64>,
}

impl Prober for Slow {
    fn probe(
        &self,
        _: &ProbeTarget,
    ) -> impl std::future::Future<Output = Result<ProbeReport, ProbeError>> + Send + 'static {
        let this = self.clone();
        async move {
            let now = this.running.fetch_add(1, Ordering::SeqCst) + 1;
            this.most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(100)).await;
            this.running.fetch_sub(1, Ordering::SeqCst);
            this.done.fetch_add(1, Ordering::SeqCst);
            Ok(ready(true))
        }
    }
}

#[tokio::test(start_paused = true)]
async fn probes_run_at_most_the_configured_concurrency() {
    let nodes = nodes(&EIGHT);
    let balancer =
        ModelBalancer::from_rng(addressed(&nodes), BalanceConfig::default(), Lcg(9)).unwrap();
    let prober = Slow::default();
    let config = ProbeConfig::builder()
        .interval(Duration::from_secs(1))
        .concurrency(3)
        .build()
        .unwrap();
    let _task = balancer
        .handle()
        .spawn_probes(prober.clone(), config)
        .expect("inside a Tokio runtime");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        prober.done.load(Ordering::SeqCst) >= 32,
        "every backend probed each round"
    );
    assert_eq!(prober.most.load(Ordering::SeqCst), 3);
}

/// A report saying only whether the server is ready.
fn ready(ready: bool) -> ProbeReport {
    let mut report = ProbeReport::default();
    report.ready = Some(ready);
    report
}
