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
use tower_model_balance::backend::{Backend, BackendId, Exclude, PickedSlot};
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
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
    fleet_with(names, resident, BalanceConfig::default())
}

/// [`fleet`] under `config`.
fn fleet_with(
    names: &[&'static str],
    resident: impl Fn(&str) -> bool,
    config: BalanceConfig,
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
    let balancer =
        ModelBalancer::new(ServiceList::new(backends.collect::<Vec<_>>()), config).unwrap();
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
        .map(|_| balancer.pick_at(&route, now).unwrap())
        .collect();
    assert_eq!(gate.utilization(), 0.75);
    assert_eq!(BalancerLoad::new(handle.clone(), 1).utilization(), 1.5);
    for picked in picks {
        picked.guard.finish(Outcome::Success);
    }
    assert_eq!(gate.utilization(), 0.0);
}

/// A backup is its request again, counted in its model's demand by its
/// first attempt: a hedged model gets no more owners (cold copies) than
/// its requests need. Counted again, `llama`'s backups made its share 2/3
/// against `mistral`'s 1/3 here: 5 owners against 3, where both need 4.
#[tokio::test(start_paused = true)]
async fn a_backup_does_not_count_again_in_its_models_demand() {
    const NAMES: [&str; 8] = ["g0", "g1", "g2", "g3", "g4", "g5", "g6", "g7"];
    let config = BalanceConfig::builder().owners(8).build().unwrap();
    let (mut service, _) = fleet_with(&NAMES, |_| true, config);
    let handle = service.handle();
    let mut send = |model: &str, exclude: Option<&str>| {
        let mut req = http::Request::post("/infer")
            .header("x-model-id", model)
            .body(String::new())
            .unwrap();
        if let Some(away) = exclude {
            let away = BackendId::new(away).unwrap();
            req.extensions_mut().insert(Exclude::new(away));
        }
        // Picked at the call (the balancer is always ready); the answer
        // is not needed.
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(service.poll_ready(&mut cx).is_ready());
        drop(service.call(req));
    };
    for _ in 0..1_200 {
        send("llama", None);
        send("mistral", None);
        // Every `llama` request hedged.
        send("llama", Some("g0"));
    }
    let owners = |m: &str| handle.owners(&ModelId::new(m).unwrap()).len();
    assert_eq!(
        owners("mistral"),
        4,
        "a half share of 8 backends at c = 1.25"
    );
    assert_eq!(owners("llama"), owners("mistral"), "as many requests each");
}
