//! The balancer tests' fleet of held mock endpoints (`tests/balance/service.rs`):
//! backends named `a`, `b`, … with the ring order of a model, requests,
//! breaker configs and a discovery source the test feeds.

use std::convert::Infallible;

use futures_util::stream;
use tokio::sync::mpsc;
use tower::discover::{Change, ServiceList};
use tower_model_balance::backend::BackendId;
use tower_model_balance::balance::{Backend, BalanceConfig, ModelBalancer};
use tower_model_balance::breaker::BreakerConfig;
use tower_model_balance::ring::{Ring, RingConfig};
use tower_model_balance::route::ModelId;

use crate::held::{Mock, Mocks};

/// The test's backends, named `a`, `b`, … in discovery order.
pub struct Fleet {
    pub names: Vec<&'static str>,
    pub held: Mocks,
    pub mocks: Vec<Mock>,
}

pub const NAMES: [&str; 4] = ["a", "b", "c", "d"];

pub fn fleet(n: usize) -> Fleet {
    let names = NAMES[..n].to_vec();
    let held = Mocks::new(&names);
    Fleet {
        mocks: held.mocks.clone(),
        names,
        held,
    }
}

impl Fleet {
    pub fn backends(&self) -> Vec<Backend<Mock>> {
        self.mocks
            .iter()
            .map(|m| Backend::new(BackendId::new(m.name).unwrap(), m.clone()))
            .collect()
    }

    /// A balancer over this fleet, from a static list.
    pub fn balancer(&self, config: BalanceConfig) -> ModelBalancer<Mock> {
        ModelBalancer::new(ServiceList::new(self.backends()), config).unwrap()
    }

    /// Ends every open response body.
    pub fn close_bodies(&self) {
        self.held.close_bodies();
    }

    pub fn served(&self, name: &str) -> usize {
        self.held.served().get(name).copied().unwrap_or(0)
    }

    /// The model's backends in ring order (the balancer's default ring).
    pub fn walk(&self, model: &str) -> Vec<&'static str> {
        let members = self.names.iter().map(|n| (BackendId::new(n).unwrap(), 1));
        let ring = Ring::build(&RingConfig::default(), members).unwrap();
        let key = ModelId::new(model).unwrap().hash64();
        ring.walk(key).map(|i| self.names[i]).collect()
    }
}

pub fn infer(model: &str) -> http::Request<String> {
    http::Request::post("/infer")
        .header("x-model-id", model)
        .body(String::new())
        .unwrap()
}

pub fn update(model: &str) -> http::Request<String> {
    http::Request::post("/update")
        .header("x-model-id", model)
        .header("x-request-kind", "update")
        .body(String::new())
        .unwrap()
}

pub fn expect_err<T>(result: Result<T, tower::BoxError>) -> tower::BoxError {
    match result {
        Ok(_) => panic!("expected an error"),
        Err(error) => error,
    }
}

/// Breakers that open once 3 of the last 4 calls (at least 3) failed.
pub fn trips_after_3_of_4() -> BalanceConfig {
    config(trip_3_of_4())
}

/// A breaker that trips on 3 failures of the last 4 calls.
pub fn trip_3_of_4() -> BreakerConfig {
    BreakerConfig::builder()
        .window(4)
        .minimum_calls(3)
        .build()
        .unwrap()
}

pub type Changes = mpsc::UnboundedSender<Change<&'static str, Backend<Mock>>>;

/// A discovery source fed by the test through the returned sender.
pub fn channel_discover() -> (
    Changes,
    impl tower::discover::Discover<Key = &'static str, Service = Backend<Mock>, Error = Infallible>
        + Send
        + 'static,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let changes = stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|c| (Ok::<_, Infallible>(c), rx))
    });
    (tx, changes)
}

pub fn config(policy: BreakerConfig) -> BalanceConfig {
    BalanceConfig::builder().breaker(policy).build().unwrap()
}
