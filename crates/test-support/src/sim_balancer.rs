//! A balancer over simulated model servers on loopback, one backend per
//! server (its address in the metadata, for probes), through hyper-util's
//! client (`tests/health/loopback.rs`, `tests/health/stream.rs`).

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use tower::discover::ServiceList;
use tower_model_balance::backend::BackendId;
use tower_model_balance::balance::{Backend, BackendMeta, BalanceConfig, ModelBalancer};
use tower_model_balance::endpoint::{Origin, SetOrigin};
use tower_model_balance_sim::ModelServer;

pub type Endpoint = SetOrigin<Client<HttpConnector, Full<Bytes>>>;

/// The balancer over `servers` with `config`.
pub fn balancer(servers: &[ModelServer], config: BalanceConfig) -> ModelBalancer<Endpoint> {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let backends: Vec<_> = servers
        .iter()
        .map(|s| {
            let origin = Origin::http(s.addr());
            let meta =
                BackendMeta::new(BackendId::new(s.name()).unwrap()).with_address(origin.clone());
            Backend::with_meta(meta, SetOrigin::to(client.clone(), origin))
        })
        .collect();
    ModelBalancer::new(ServiceList::new(backends), config).unwrap()
}
