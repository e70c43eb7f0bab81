//! What the pick API's tests share (`tests/balance/pick.rs`,
//! `tests/balance/pick_urgency.rs`): ring order, IDs and routes, a source of
//! backends named by their endpoints, and balancers over held mocks.

use std::convert::Infallible;
use std::task::{Context, Poll};

use futures_util::stream;
use tower::discover::{Change, ServiceList};
use tower::{Service, ServiceExt};
use tower_model_balance::backend::{Backend, BackendId};
use tower_model_balance::balance::{BalanceConfig, ModelBalancer, Picked, ResponseBody};
use tower_model_balance::ring::{Ring, RingConfig};
use tower_model_balance::route::{ModelId, RequestKind, RouteInfo};

use crate::held::{Body, Mock, Mocks};
use crate::lcg::Lcg;

/// The backends `model` walks, in ring order (the balancer's default ring,
/// every backend of weight 1).
pub fn walk(names: &[&'static str], model: &str) -> Vec<&'static str> {
    let members = names.iter().map(|n| (BackendId::new(n).unwrap(), 1));
    let ring = Ring::build(&RingConfig::default(), members).unwrap();
    let key = ModelId::new(model).unwrap().hash64();
    ring.walk(key).map(|i| names[i]).collect()
}

pub fn id(name: &str) -> BackendId {
    BackendId::new(name).unwrap()
}

pub fn model(name: &str) -> ModelId {
    ModelId::new(name).unwrap()
}

pub fn inference(name: &str) -> RouteInfo {
    RouteInfo::new(model(name))
}

pub fn update(name: &str) -> RouteInfo {
    let mut route = RouteInfo::new(model(name));
    route.kind = RequestKind::Update;
    route
}

/// A discovery source that yields its backends at once and ends.
pub type Listed =
    stream::Iter<std::vec::IntoIter<Result<Change<usize, Backend<String>>, Infallible>>>;

/// A source of backends whose endpoints are their names (the pick API
/// takes any `Clone` endpoint); it ends at once, so no task is spawned.
pub fn named(names: &[&'static str]) -> Listed {
    let changes: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(key, &name)| Ok(Change::Insert(key, Backend::new(id(name), name.to_owned()))))
        .collect();
    stream::iter(changes)
}

/// Picks `route` now; panics when nothing can be picked.
pub fn pick<E: Clone>(balancer: &mut ModelBalancer<E, Lcg>, route: &RouteInfo) -> Picked<E> {
    balancer.pick(route).unwrap()
}

/// An endpoint answering with its name, a body that is not read: the
/// request stays in flight until the response is dropped.
#[derive(Clone)]
pub struct Named(pub &'static str);

impl Service<http::Request<String>> for Named {
    type Response = http::Response<String>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Request<String>) -> Self::Future {
        std::future::ready(Ok(http::Response::new(self.0.to_owned())))
    }
}

pub fn request(model: &str, urgency: Option<&str>) -> http::Request<String> {
    let mut req = http::Request::post("/infer").header("x-model-id", model);
    if let Some(urgency) = urgency {
        req = req.header("x-urgency", urgency);
    }
    req.body(String::new()).unwrap()
}

/// A balancer over `mocks`, sampling from `Lcg(seed)`.
pub fn balancer(mocks: &Mocks, config: BalanceConfig, seed: u64) -> ModelBalancer<Mock, Lcg> {
    let backends = mocks
        .mocks
        .iter()
        .map(|m| Backend::new(id(m.name), m.clone()));
    let list = ServiceList::new(backends.collect::<Vec<_>>());
    ModelBalancer::from_rng(list, config, Lcg(seed)).unwrap()
}

/// Sends `req` and keeps its response (its body open: in flight); returns
/// the backend that served it.
pub async fn send(
    balancer: &mut ModelBalancer<Mock, Lcg>,
    mocks: &Mocks,
    req: http::Request<String>,
    held: &mut Vec<http::Response<ResponseBody<Body>>>,
) -> &'static str {
    let before = mocks.served();
    let rsp = balancer.ready().await.unwrap().call(req).await.unwrap();
    held.push(rsp);
    let after = mocks.served();
    let mut by = after
        .iter()
        .filter(|&(name, n)| before.get(name).copied().unwrap_or(0) < *n)
        .map(|(name, _)| *name);
    let served = by.next().expect("a backend served the request");
    assert!(by.next().is_none());
    served
}
