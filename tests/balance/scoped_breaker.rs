//! Breaker scope: with `BreakerScope::BackendModel`, a backend failing for
//! one model is ejected for that model only; the pairs tracked stay within
//! `max_pairs`.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tower::discover::ServiceList;
use tower::ServiceExt;
use tower_model_balance::backend::{Backend, BackendId};
use tower_model_balance::balance::{BalanceConfig, BalancerHandle, BreakerScope, ModelBalancer};
use tower_model_balance::breaker::{BreakerConfig, BreakerState};
use tower_model_balance::ring::{Ring, RingConfig};
use tower_model_balance::route::ModelId;

const NAMES: [&str; 4] = ["a", "b", "c", "d"];

/// A mock backend that answers 503 for the models in its `failing` set and
/// 200 for the others, counting requests by (backend, model).
#[derive(Clone)]
struct ByModel {
    name: &'static str,
    failing: Arc<Mutex<HashSet<String>>>,
    served: Arc<Mutex<HashMap<(&'static str, String), usize>>>,
}

impl tower::Service<http::Request<String>> for ByModel {
    type Response = http::Response<String>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<String>) -> Self::Future {
        let model = req.headers()["x-model-id"].to_str().unwrap().to_owned();
        let status = if self.failing.lock().unwrap().contains(&model) {
            503
        } else {
            200
        };
        *self
            .served
            .lock()
            .unwrap()
            .entry((self.name, model))
            .or_default() += 1;
        let response = http::Response::builder().status(status);
        std::future::ready(Ok(response.body(String::new()).unwrap()))
    }
}

struct Fleet {
    mocks: Vec<ByModel>,
    served: Arc<Mutex<HashMap<(&'static str, String), usize>>>,
}

impl Fleet {
    fn new() -> Self {
        let served = Arc::new(Mutex::new(HashMap::new()));
        let mocks = NAMES
            .iter()
            .map(|&name| ByModel {
                name,
                failing: Arc::default(),
                served: served.clone(),
            })
            .collect();
        Self { mocks, served }
    }

    fn balancer(&self, config: BalanceConfig) -> ModelBalancer<ByModel> {
        let backends = self
            .mocks
            .iter()
            .map(|m| Backend::new(BackendId::new(m.name).unwrap(), m.clone()));
        ModelBalancer::new(ServiceList::new(backends.collect::<Vec<_>>()), config).unwrap()
    }

    /// Makes `backend` answer 503 for `model`.
    fn fail(&self, backend: &str, model: &str) {
        let mock = self.mocks.iter().find(|m| m.name == backend).unwrap();
        mock.failing.lock().unwrap().insert(model.to_owned());
    }

    fn served(&self, backend: &str, model: &str) -> usize {
        let served = self.served.lock().unwrap();
        let key = NAMES.iter().find(|&&n| n == backend).unwrap();
        served.get(&(*key, model.to_owned())).copied().unwrap_or(0)
    }
}

/// The model's primary owner on the balancer's default ring.
fn primary(model: &str) -> &'static str {
    let members = NAMES.iter().map(|n| (BackendId::new(n).unwrap(), 1));
    let ring = Ring::build(&RingConfig::default(), members).unwrap();
    let key = ModelId::new(model).unwrap().hash64();
    NAMES[ring.walk(key).next().unwrap()]
}

/// Sends one inference request for `model` and ends it (the status
/// decides the outcome); returns the status.
async fn infer(balancer: &ModelBalancer<ByModel>, model: &str) -> u16 {
    let req = http::Request::post("/infer")
        .header("x-model-id", model)
        .body(String::new())
        .unwrap();
    let rsp = balancer.clone().oneshot(req).await.unwrap();
    rsp.status().as_u16()
}

/// Breakers that open once 3 of the last 4 calls (at least 3) failed.
fn config(scope: BreakerScope) -> BalanceConfig {
    let policy = BreakerConfig::builder()
        .window(4)
        .minimum_calls(3)
        .build()
        .unwrap();
    BalanceConfig::builder()
        .breaker(policy)
        .breaker_scope(scope)
        .build()
        .unwrap()
}

fn state(handle: &BalancerHandle, backend: &str, model: &str) -> BreakerState {
    let (backend, model) = (
        BackendId::new(backend).unwrap(),
        ModelId::new(model).unwrap(),
    );
    handle.breaker_state(&backend, &model).unwrap()
}

const A: &str = "model-a";

/// A model whose primary owner is `A`'s.
fn model_b() -> String {
    (0..)
        .map(|i| format!("model-b-{i}"))
        .find(|m| primary(m) == primary(A))
        .unwrap()
}

/// With `X` the primary owner of `A` and `B`, failing `A` only: trips `X`'s
/// breaker for `A` with three failures, then sends three requests for each
/// model. Returns `X` and `B`.
async fn trip_for_a(f: &Fleet, balancer: &ModelBalancer<ByModel>) -> (&'static str, String) {
    let (x, b) = (primary(A), model_b());
    f.fail(x, A);
    for _ in 0..3 {
        assert_eq!(infer(balancer, A).await, 503);
    }
    for _ in 0..3 {
        assert_eq!(infer(balancer, A).await, 200, "A moved away from X");
        assert_eq!(infer(balancer, &b).await, 200);
    }
    (x, b)
}

#[tokio::test(start_paused = true)]
async fn with_backend_model_scope_a_failure_for_one_model_keeps_the_others() {
    let f = Fleet::new();
    let balancer = f.balancer(config(BreakerScope::BackendModel { max_pairs: 64 }));
    let (x, b) = trip_for_a(&f, &balancer).await;
    assert_eq!(f.served(x, A), 3, "A avoids X once its pair opened");
    assert_eq!(f.served(x, &b), 3, "B still goes to X");
    let handle = balancer.handle();
    assert_eq!(state(&handle, x, A), BreakerState::Open);
    assert_eq!(state(&handle, x, &b), BreakerState::Closed);
    let status = handle.backends().into_iter().find(|b| b.id.as_str() == x);
    assert_eq!(
        status.unwrap().breaker,
        BreakerState::Closed,
        "backend level"
    );
    assert_eq!(
        handle.stats().tracked_pairs,
        3,
        "(X, A), (X, B), A's new backend"
    );
    assert_eq!(handle.stats().no_backend, 0);
}

#[tokio::test(start_paused = true)]
async fn with_the_default_scope_the_same_failures_eject_the_backend_for_all() {
    let f = Fleet::new();
    let balancer = f.balancer(config(BreakerScope::Backend));
    let (x, b) = trip_for_a(&f, &balancer).await;
    assert_eq!(f.served(x, A), 3);
    assert_eq!(f.served(x, &b), 0, "B moved away from X as well");
    let handle = balancer.handle();
    assert_eq!(state(&handle, x, A), BreakerState::Open);
    assert_eq!(state(&handle, x, &b), BreakerState::Open, "one breaker");
    assert_eq!(handle.stats().tracked_pairs, 0);
}

#[tokio::test(start_paused = true)]
async fn tracked_pairs_never_exceed_max_pairs() {
    let f = Fleet::new();
    // One failure opens a breaker.
    let policy = BreakerConfig::builder()
        .window(1)
        .minimum_calls(1)
        .build()
        .unwrap();
    let config = BalanceConfig::builder()
        .breaker(policy)
        .breaker_scope(BreakerScope::BackendModel { max_pairs: 3 })
        .build()
        .unwrap();
    let balancer = f.balancer(config);
    let handle = balancer.handle();
    let x = primary(A);
    f.fail(x, A);
    // A request in flight on (X, A) while its pair is evicted.
    let held = {
        let req = http::Request::post("/infer")
            .header("x-model-id", A)
            .body(String::new())
            .unwrap();
        balancer.clone().oneshot(req).await.unwrap()
    };
    assert_eq!(held.status(), 503);
    for round in 0..3 {
        for i in 0..20 {
            assert_eq!(infer(&balancer, &format!("m-{i}")).await, 200);
            assert!(
                handle.stats().tracked_pairs <= 3,
                "round {round}, model {i}"
            );
        }
    }
    assert_eq!(handle.stats().tracked_pairs, 3);
    assert_eq!(state(&handle, x, A), BreakerState::Closed, "(X, A) evicted");
    // Its failure lands in the evicted breaker, which nothing reads.
    drop(held);
    assert_eq!(state(&handle, x, A), BreakerState::Closed);
    assert!(handle.stats().tracked_pairs <= 3);
    assert_eq!(infer(&balancer, A).await, 503, "X is eligible for A again");
    assert_eq!(state(&handle, x, A), BreakerState::Open, "a fresh pair");
}

#[test]
fn max_pairs_is_validated() {
    for max_pairs in [0, 1_000_001] {
        let scope = BreakerScope::BackendModel { max_pairs };
        let err = BalanceConfig::builder()
            .breaker_scope(scope)
            .build()
            .unwrap_err();
        assert_eq!(err.field, "breaker_scope");
    }
    for max_pairs in [1, 1_000_000] {
        let scope = BreakerScope::BackendModel { max_pairs };
        let config = BalanceConfig::builder().breaker_scope(scope).build();
        assert!(format!("{:?}", config.unwrap()).contains(&format!("{scope:?}")));
    }
    let default = format!("{:?}", BalanceConfig::default());
    assert!(default.contains("breaker_scope: Backend,"), "{default}");
}
