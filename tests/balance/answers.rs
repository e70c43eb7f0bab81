//! What the balancer learns from its backends' answers (pure services, a
//! paused clock): a 404 makes a model absent where it was believed
//! resident; a half-open breaker closes on a 4xx answer (a server
//! restarted without its models is up); a retry after a 503 goes to
//! another backend.

use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tower::discover::ServiceList;
use tower::retry::RetryLayer;
use tower::{service_fn, Layer, ServiceExt};
use tower_model_balance::backend::{Backend, BackendId};
use tower_model_balance::balance::{BalanceConfig, BalancerHandle, BreakerScope, ModelBalancer};
use tower_model_balance::breaker::{BreakerConfig, BreakerState};
use tower_model_balance::error::BoxError;
use tower_model_balance::hedge::{HedgeConfig, HedgeLayer};
use tower_model_balance::route::ModelId;

/// A backend answering the status its cell holds, counting its calls.
#[derive(Clone, Default)]
struct Script {
    status: Arc<AtomicU16>,
    calls: Arc<AtomicUsize>,
}

impl Script {
    fn answering(status: u16) -> Self {
        let script = Self::default();
        script.status.store(status, Ordering::SeqCst);
        script
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

type Endpoint =
    tower::util::BoxCloneSyncService<http::Request<String>, http::Response<String>, BoxError>;

fn endpoint(script: &Script) -> Endpoint {
    let script = script.clone();
    tower::util::BoxCloneSyncService::new(service_fn(move |_req: http::Request<String>| {
        let script = script.clone();
        async move {
            script.calls.fetch_add(1, Ordering::SeqCst);
            let status = script.status.load(Ordering::SeqCst);
            Ok::<_, BoxError>(
                http::Response::builder()
                    .status(status)
                    .body(String::new())
                    .unwrap(),
            )
        }
    }))
}

fn node(i: usize) -> BackendId {
    BackendId::new(&format!("node-{i}")).unwrap()
}

/// Backends answering as `scripts` say, each model with one owner, the
/// breaker opening after 3 failures in a row for 1 s (no jitter).
fn balancer(scripts: &[Script]) -> (ModelBalancer<Endpoint>, BalancerHandle) {
    balancer_in(scripts, BreakerScope::Backend)
}

/// As [`balancer`], with breakers of `scope`.
fn balancer_in(
    scripts: &[Script],
    scope: BreakerScope,
) -> (ModelBalancer<Endpoint>, BalancerHandle) {
    let backends: Vec<_> = scripts
        .iter()
        .enumerate()
        .map(|(i, s)| Backend::new(node(i), endpoint(s)))
        .collect();
    let breaker = BreakerConfig::builder()
        .consecutive_failures(3)
        .open_duration(Duration::from_secs(1))
        .jitter(false)
        .build()
        .unwrap();
    let config = BalanceConfig::builder()
        .owners(1)
        .breaker(breaker)
        .breaker_scope(scope)
        .panic_threshold(0.0)
        .build()
        .unwrap();
    let balancer = ModelBalancer::new(ServiceList::new(backends), config).unwrap();
    let handle = balancer.handle();
    (balancer, handle)
}

/// A model whose one owner is `owner`.
fn model_owned_by(handle: &BalancerHandle, owner: usize) -> ModelId {
    (0..)
        .map(|i| ModelId::new(&format!("m{i}")).unwrap())
        .find(|m| handle.owners(m) == [node(owner)])
        .unwrap()
}

fn request(model: &ModelId) -> http::Request<String> {
    http::Request::post("/infer")
        .header("x-model-id", model.as_str())
        .body(String::new())
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_404_makes_the_model_absent_there() {
    let scripts = [Script::answering(404), Script::answering(200)];
    let (balancer, handle) = balancer(&scripts);
    let model = model_owned_by(&handle, 0);
    handle.set_resident_models(&node(0), [&model]);
    handle.set_resident_models(&node(1), [&model]);
    assert!(handle.is_resident(&node(0), &model));
    let response = balancer.clone().oneshot(request(&model)).await.unwrap();
    assert_eq!(response.status(), 404);
    drop(response);
    assert!(
        !handle.is_resident(&node(0), &model),
        "the server said it does not hold it"
    );
    assert!(handle.is_resident(&node(1), &model));
    // The next request goes where the model is, not to its owner.
    let response = balancer.clone().oneshot(request(&model)).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!((scripts[0].calls(), scripts[1].calls()), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_half_open_breaker_closes_on_a_4xx_answer() {
    // The backend's breaker, and a (backend, model) pair's (the gateway's
    // scope): the one that admitted the request is asked.
    for scope in [
        BreakerScope::Backend,
        BreakerScope::BackendModel { max_pairs: 16 },
    ] {
        let scripts = [Script::answering(503)];
        let (balancer, handle) = balancer_in(&scripts, scope);
        let model = model_owned_by(&handle, 0);
        let state = || handle.breaker_state(&node(0), &model).unwrap();
        for _ in 0..3 {
            let response = balancer.clone().oneshot(request(&model)).await.unwrap();
            assert_eq!(response.status(), 503);
        }
        assert_eq!(state(), BreakerState::Open, "{scope:?}");
        // Restarted without its models: it answers, 404.
        scripts[0].status.store(404, Ordering::SeqCst);
        tokio::time::advance(Duration::from_millis(1_001)).await;
        for _ in 0..3 {
            let response = balancer.clone().oneshot(request(&model)).await.unwrap();
            assert_eq!(response.status(), 404);
        }
        assert_eq!(
            state(),
            BreakerState::Closed,
            "a backend that answers is up: {scope:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_503_is_retried_on_another_backend() {
    let scripts = [Script::answering(503), Script::answering(200)];
    let (balancer, handle) = balancer(&scripts);
    let model = model_owned_by(&handle, 0);
    // Resident on its owner only: a hedge's exclusion alone would send
    // the retry back there; a retry's is strict.
    handle.set_resident_models(&node(0), [&model]);
    let hedge = HedgeLayer::new(HedgeConfig::default());
    let stack = hedge.layer(RetryLayer::new(hedge.retry_policy()).layer(balancer));
    // Requests that fund the budget (5% of them may be retried).
    let other = model_owned_by(&handle, 1);
    for _ in 0..20 {
        let response = stack.clone().oneshot(request(&other)).await.unwrap();
        assert_eq!(response.status(), 200);
    }
    scripts[1].calls.store(0, Ordering::SeqCst);
    let response = stack.oneshot(request(&model)).await.unwrap();
    assert_eq!(response.status(), 200, "the retry answered");
    assert_eq!((scripts[0].calls(), scripts[1].calls()), (1, 1));
}
