//! What the health tests share (`tests/health/scores.rs`,
//! `tests/health/probes.rs`): nodes that answer in 20 ms, a balancer over
//! them, and concurrent update workers.

use std::time::Duration;

use tower::discover::ServiceList;
use tower_model_balance::backend::BackendId;
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};

use crate::lcg::Lcg;
use crate::nodes::{worker, Behavior, Node};

pub const FAST: Duration = Duration::from_millis(20);

pub fn id(name: &str) -> BackendId {
    BackendId::new(name).unwrap()
}

pub fn nodes(names: &[&'static str]) -> Vec<Node> {
    names
        .iter()
        .map(|&n| Node::new(n, Behavior::Serve(FAST)))
        .collect()
}

pub const EIGHT: [&str; 8] = ["a", "b", "c", "d", "e", "f", "g", "h"];

pub fn balancer(nodes: &[Node], config: BalanceConfig, seed: u64) -> ModelBalancer<Node, Lcg> {
    let list = ServiceList::new(nodes.iter().map(Node::backend).collect::<Vec<_>>());
    ModelBalancer::from_rng(list, config, Lcg(seed)).unwrap()
}

/// Runs `workers` concurrent update workers of `each` requests.
pub async fn updates(balancer: &ModelBalancer<Node, Lcg>, workers: usize, each: usize) {
    let tasks: Vec<_> = (0..workers)
        .map(|w| {
            let b = balancer.clone();
            tokio::spawn(worker(b, format!("index-{w}"), true, each))
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}
