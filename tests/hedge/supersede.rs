//! A first attempt that its backup outran has lost a race, not failed:
//! its backend's breaker and health count nothing (with no fault anywhere
//! a gateway saw three lost races in a row open a breaker on a healthy
//! server). A caller dropping the whole request counts nothing either.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tower::discover::ServiceList;
use tower::{Layer, Service, ServiceExt};
use tower_model_balance::backend::{Backend, BackendId};
use tower_model_balance::balance::{BalanceConfig, BalancerHandle, ModelBalancer};
use tower_model_balance::breaker::{BreakerConfig, BreakerState};
use tower_model_balance::hedge::{Hedge, HedgeConfig, HedgeHandle, HedgeLayer};
use tower_model_balance::route::ModelId;

/// `node-0` never answers; `node-1` answers at once. Counts `node-0`'s
/// calls.
#[derive(Clone)]
struct Endpoint {
    hangs: bool,
    hung: Arc<AtomicUsize>,
}

impl Service<http::Request<String>> for Endpoint {
    type Response = http::Response<String>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Request<String>) -> Self::Future {
        let hangs = self.hangs;
        if hangs {
            self.hung.fetch_add(1, Ordering::SeqCst);
        }
        Box::pin(async move {
            if hangs {
                std::future::pending::<()>().await;
            }
            Ok(http::Response::new(String::new()))
        })
    }
}

struct Fleet {
    stack: Hedge<ModelBalancer<Endpoint>>,
    handle: BalancerHandle,
    hedges: HedgeHandle,
    hung: Arc<AtomicUsize>,
    /// A model whose one owner is `node-0`.
    model: ModelId,
}

/// Two backends, each model with one owner, a breaker tripping after 3
/// failures in a row; the model resident on `node-1`, and on `node-0` as
/// well when `warm`. Hedges after 20 ms, whatever the budget.
fn fleet(warm: bool) -> Fleet {
    fleet_with(warm, 1.0)
}

/// As [`fleet`], the breakers tripping at `slow_rate` slow calls of 10.
fn fleet_with(warm: bool, slow_rate: f64) -> Fleet {
    let hung = Arc::new(AtomicUsize::new(0));
    let backends: Vec<_> = (0..2)
        .map(|i| {
            let endpoint = Endpoint {
                hangs: i == 0,
                hung: hung.clone(),
            };
            Backend::new(BackendId::new(&format!("node-{i}")).unwrap(), endpoint)
        })
        .collect();
    let policy = BreakerConfig::builder()
        .window(10)
        .minimum_calls(10)
        .consecutive_failures(3)
        .slow_call_rate_threshold(slow_rate)
        .build()
        .unwrap();
    let config = BalanceConfig::builder()
        .owners(1)
        .breaker(policy)
        .panic_threshold(0.0)
        .build()
        .unwrap();
    let balancer = ModelBalancer::new(ServiceList::new(backends), config).unwrap();
    let handle = balancer.handle();
    let node = |i: usize| BackendId::new(&format!("node-{i}")).unwrap();
    let model = (0..)
        .map(|i| ModelId::new(&format!("m{i}")).unwrap())
        .find(|m| handle.owners(m) == [node(0)])
        .unwrap();
    handle.set_resident_models(&node(1), [&model]);
    if warm {
        handle.set_resident_models(&node(0), [&model]);
    }
    let policy = HedgeConfig::builder()
        .min_samples(0)
        .floor(Duration::from_millis(20))
        .ceiling(Duration::from_millis(20))
        .budget_ratio(1.0)
        .build()
        .unwrap();
    let layer = HedgeLayer::new(policy);
    let hedges = layer.handle();
    Fleet {
        stack: layer.layer(balancer),
        handle,
        hedges,
        hung,
        model,
    }
}

impl Fleet {
    fn request(&self) -> http::Request<String> {
        http::Request::post("/infer")
            .header("x-model-id", self.model.as_str())
            .body(String::new())
            .unwrap()
    }

    /// Sends one request; its status.
    async fn send(&self) -> u16 {
        let rsp = self.stack.clone().oneshot(self.request()).await.unwrap();
        rsp.status().as_u16()
    }

    fn node0(&self) -> tower_model_balance::balance::BackendStatus {
        self.handle.backends().remove(0)
    }
}

#[tokio::test(start_paused = true)]
async fn a_backend_outrun_by_backups_is_not_failed() {
    let fleet = fleet(true);
    for _ in 0..5 {
        assert_eq!(fleet.send().await, 200, "the backup answers");
    }
    assert_eq!(
        fleet.hung.load(Ordering::SeqCst),
        5,
        "node-0 keeps its turn"
    );
    assert_eq!(fleet.hedges.stats().hedges_won, 5);
    let node0 = fleet.node0();
    assert_eq!(node0.failures, 0, "a lost race is no failure: {node0:?}");
    assert_eq!(node0.breaker, BreakerState::Closed, "{node0:?}");
    assert_eq!(node0.breaker_trips, 0);
    assert_eq!(fleet.handle.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn lost_races_are_slow_calls_and_trip_a_slow_call_rate() {
    // Half of 10 calls slow trips: a backend that loses every race is out
    // on its slow-call rate, with no failure counted.
    let fleet = fleet_with(true, 0.5);
    for _ in 0..10 {
        assert_eq!(fleet.send().await, 200, "the backup answers");
    }
    let node0 = fleet.node0();
    assert_eq!(node0.failures, 0, "{node0:?}");
    assert_eq!(node0.breaker, BreakerState::Open, "{node0:?}");
    assert_eq!(node0.breaker_trips, 1);
    let hung = fleet.hung.load(Ordering::SeqCst);
    assert_eq!(fleet.send().await, 200);
    assert_eq!(fleet.hung.load(Ordering::SeqCst), hung, "node-0 is out");
    assert_eq!(fleet.handle.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_cold_first_attempt_outrun_by_its_backup_counts_nothing() {
    let fleet = fleet(false);
    for _ in 0..5 {
        assert_eq!(fleet.send().await, 200, "the backup answers");
    }
    assert_eq!(
        fleet.hung.load(Ordering::SeqCst),
        5,
        "node-0 keeps its turn"
    );
    let node0 = fleet.node0();
    assert_eq!(node0.failures, 0, "a cold start is not judged: {node0:?}");
    assert_eq!(node0.breaker, BreakerState::Closed);
    assert_eq!(fleet.handle.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_request_dropped_by_its_caller_counts_nothing() {
    let fleet = fleet(true);
    for _ in 0..5 {
        // Given up before the hedge delay: no backup, nothing outrun.
        let call = fleet.stack.clone().oneshot(fleet.request());
        let dropped = tokio::time::timeout(Duration::from_millis(10), call).await;
        assert!(dropped.is_err());
    }
    assert_eq!(fleet.hung.load(Ordering::SeqCst), 5);
    let node0 = fleet.node0();
    assert_eq!(node0.failures, 0, "cancelled, not failed: {node0:?}");
    assert_eq!(node0.breaker, BreakerState::Closed);
    assert_eq!(fleet.hedges.stats().hedges, 0);
    assert_eq!(fleet.handle.in_flight(), 0);
}
