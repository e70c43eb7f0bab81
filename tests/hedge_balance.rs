//! The hedge over the balancer: the balancer writes its pick in the first
//! attempt's slot, the backup's `Exclude` sends it to another backend that
//! holds the model (and the balancer refuses it when no other does), and
//! the load gate reads the balancer's utilization.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tower::discover::ServiceList;
use tower::{Layer, Service, ServiceExt};
use tower_model_balance::backend::{BackendId, Exclude, PickedSlot};
use tower_model_balance::balance::{Backend, BalanceConfig, ModelBalancer};
use tower_model_balance::classify::Outcome;
use tower_model_balance::hedge::{BalancerLoad, HedgeConfig, HedgeLayer, LoadGate};
use tower_model_balance::route::{ModelId, RouteInfo};

type Calls = Arc<Mutex<Vec<&'static str>>>;

/// One backend: records its name per call; the fleet's first call never
/// answers, every later one answers at once, naming the backend in
/// `x-backend`.
#[derive(Clone)]
struct Endpoint {
    name: &'static str,
    calls: Calls,
    started: Arc<AtomicUsize>,
}

impl Service<http::Request<String>> for Endpoint {
    type Response = http::Response<String>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Request<String>) -> Self::Future {
        self.calls.lock().unwrap().push(self.name);
        let first = self.started.fetch_add(1, Ordering::SeqCst) == 0;
        let name = self.name;
        Box::pin(async move {
            if first {
                std::future::pending::<()>().await;
            }
            let response = http::Response::builder().header("x-backend", name);
            Ok(response.body(String::new()).unwrap())
        })
    }
}

/// A balancer over `names`, each backend's models declared: `llama`
/// where `resident` says, nothing elsewhere.
fn fleet(
    names: &[&'static str],
    resident: impl Fn(&str) -> bool,
) -> (ModelBalancer<Endpoint>, Calls) {
    let calls: Calls = Arc::default();
    let started = Arc::new(AtomicUsize::new(0));
    let backends = names.iter().map(|&name| {
        let endpoint = Endpoint {
            name,
            calls: calls.clone(),
            started: started.clone(),
        };
        Backend::new(BackendId::new(name).unwrap(), endpoint)
    });
    let balancer = ModelBalancer::new(
        ServiceList::new(backends.collect::<Vec<_>>()),
        BalanceConfig::default(),
    )
    .unwrap();
    let model = ModelId::new("llama").unwrap();
    for &name in names {
        // Each backend's whole list, as a probe would give it: where it
        // lacks the model, the balancer knows.
        let id = BackendId::new(name).unwrap();
        let listed = resident(name).then_some(&model);
        assert!(balancer.handle().set_resident_models(&id, listed));
    }
    (balancer, calls)
}

fn request() -> http::Request<String> {
    http::Request::post("/v2/models/llama/infer")
        .header("x-model-id", "llama")
        .body(String::new())
        .unwrap()
}

fn layer() -> HedgeLayer {
    let policy = HedgeConfig::builder()
        .min_samples(0)
        .floor(Duration::from_millis(10))
        .ceiling(Duration::from_millis(10))
        .budget_ratio(1.0)
        .build()
        .unwrap();
    HedgeLayer::new(policy)
}

fn text<B>(response: http::Response<B>) -> String {
    response.headers()["x-backend"].to_str().unwrap().to_owned()
}

#[tokio::test(start_paused = true)]
async fn the_backup_goes_to_another_backend_holding_the_model() {
    let (service, calls) = fleet(&["gpu-0", "gpu-1", "gpu-2"], |_| true);
    let layer = layer();
    let response = layer.layer(service).oneshot(request()).await.unwrap();
    let calls = calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 2);
    assert_ne!(
        calls[0], calls[1],
        "the backup excluded the first attempt's backend"
    );
    assert_eq!(text(response), calls[1]);
    assert_eq!(layer.handle().stats().hedges_won, 1);
}

#[tokio::test(start_paused = true)]
async fn a_backup_with_no_other_backend_holding_the_model_is_suppressed() {
    // Only gpu-0 holds the model, and gpu-1's list says it does not: a
    // backup would land on gpu-0 again or pay a cold load on gpu-1. It is not sent, and the budget it took is
    // given back; the first attempt goes on alone (and, here, never
    // answers: the test times it out).
    let (service, calls) = fleet(&["gpu-0", "gpu-1"], |name| name == "gpu-0");
    let layer = layer();
    let call = layer.layer(service).oneshot(request());
    let timed_out = tokio::time::timeout(Duration::from_secs(1), call).await;
    assert!(timed_out.is_err(), "the first attempt never answers");
    assert_eq!(calls.lock().unwrap().clone(), ["gpu-0"]);
    let s = layer.handle().stats();
    assert_eq!((s.hedges, s.suppressed_by_no_alternative), (0, 1));
    assert_eq!(s.not_hedged(), 1, "the request is accounted once");
    assert_eq!(layer.handle().budget().granted(), 0, "given back");
    // The only backend of a fleet: no backup either.
    let (service, calls) = fleet(&["solo"], |_| true);
    let solo = self::layer();
    let call = solo.layer(service).oneshot(request());
    assert!(tokio::time::timeout(Duration::from_secs(1), call)
        .await
        .is_err());
    assert_eq!(calls.lock().unwrap().len(), 1);
    assert_eq!(solo.handle().stats().suppressed_by_no_alternative, 1);
}

#[tokio::test(start_paused = true)]
async fn the_balancer_writes_its_pick_in_the_slot_and_honours_exclude() {
    let (mut service, calls) = fleet(&["gpu-0", "gpu-1", "gpu-2"], |_| true);
    // Let the first (never answering) call go somewhere.
    let mut first = request();
    let slot = PickedSlot::new();
    first.extensions_mut().insert(slot.clone());
    let pending = service.ready().await.unwrap().call(first);
    let picked = slot.get().expect("written at call").clone();
    assert_eq!(calls.lock().unwrap()[0], picked.as_str());
    drop(pending);
    // Excluding a backend: never picked while another holds the model.
    for _ in 0..20 {
        let mut req = request();
        req.extensions_mut().insert(Exclude::new(picked.clone()));
        let response = service.ready().await.unwrap().call(req).await.unwrap();
        assert_ne!(text(response), picked.as_str());
    }
}

#[tokio::test]
async fn the_load_gate_reads_in_flight_against_capacity() {
    let backends = ["a", "b"].into_iter().enumerate().map(|(i, name)| {
        let backend = Backend::new(BackendId::new(name).unwrap(), ());
        Ok::<_, std::convert::Infallible>(tower::discover::Change::Insert(i, backend))
    });
    let source = futures_util::stream::iter(backends);
    let mut balancer = ModelBalancer::new(source, BalanceConfig::default()).unwrap();
    let handle = balancer.handle();
    let gate = BalancerLoad::new(handle.clone(), 2);
    assert_eq!(gate.utilization(), 0.0);
    let route = RouteInfo::new(ModelId::new("llama").unwrap());
    let now = tokio::time::Instant::now();
    let picks: Vec<_> = (0..3)
        .map(|_| balancer.pick(&route, now).unwrap())
        .collect();
    assert_eq!(handle.utilization(2), 0.75);
    assert_eq!(gate.utilization(), 0.75);
    assert_eq!(handle.utilization(1), 1.5);
    for picked in picks {
        picked.guard.finish(Outcome::Success);
    }
    assert_eq!(gate.utilization(), 0.0);
}
