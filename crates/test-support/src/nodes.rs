//! Mock backends that answer after a latency on Tokio's clock (paused in
//! tests), or fail at once, as the test sets while traffic runs.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http_body_util::BodyExt;
use tower::{Service, ServiceExt};
use tower_model_balance::backend::BackendId;
use tower_model_balance::balance::{Backend, ModelBalancer};

/// What a node does with each request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Behavior {
    /// Answers 200 after this long.
    Serve(Duration),
    /// Answers 500 at once.
    Fail,
    /// Answers 500 at once to every n-th request it receives, 200 at once
    /// to the others.
    FailOneIn(u64),
}

/// One mock backend.
#[derive(Clone)]
pub struct Node {
    pub name: &'static str,
    behavior: Arc<Mutex<Behavior>>,
    served: Arc<AtomicU64>,
}

impl Node {
    pub fn new(name: &'static str, behavior: Behavior) -> Self {
        Self {
            name,
            behavior: Arc::new(Mutex::new(behavior)),
            served: Arc::default(),
        }
    }

    /// What it does from now on.
    pub fn set(&self, behavior: Behavior) {
        *self.behavior.lock().unwrap() = behavior;
    }

    /// Requests received.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    pub fn backend(&self) -> Backend<Node> {
        Backend::new(BackendId::new(self.name).unwrap(), self.clone())
    }
}

impl Service<http::Request<String>> for Node {
    type Response = http::Response<String>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Request<String>) -> Self::Future {
        let nth = self.served.fetch_add(1, Ordering::Relaxed) + 1;
        // How long until a 200, or `None` for a 500 at once.
        let serve = match *self.behavior.lock().unwrap() {
            Behavior::Serve(latency) => Some(latency),
            Behavior::Fail => None,
            Behavior::FailOneIn(n) => (!nth.is_multiple_of(n)).then_some(Duration::ZERO),
        };
        Box::pin(async move {
            match serve {
                Some(latency) => {
                    tokio::time::sleep(latency).await;
                    Ok(http::Response::new(String::new()))
                }
                None => {
                    let mut rsp = http::Response::new(String::new());
                    *rsp.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
                    Ok(rsp)
                }
            }
        })
    }
}

/// An update (`update: true`) or inference request for `model`.
pub fn request(model: &str, update: bool) -> http::Request<String> {
    let kind = if update { "update" } else { "inference" };
    http::Request::post("/")
        .header("x-model-id", model)
        .header("x-request-kind", kind)
        .body(String::new())
        .unwrap()
}

/// Sends `requests` one after another through a clone of `balancer`,
/// reading each body to its end; returns how many failed.
pub async fn worker<R>(
    balancer: ModelBalancer<Node, R>,
    model: String,
    update: bool,
    requests: usize,
) -> usize
where
    R: tower::util::rng::Rng + Clone,
{
    let mut failed = 0;
    for _ in 0..requests {
        match balancer.clone().oneshot(request(&model, update)).await {
            Ok(rsp) => {
                failed += usize::from(!rsp.status().is_success());
                let _ = rsp.into_body().collect().await;
            }
            Err(_) => failed += 1,
        }
    }
    failed
}

/// Requests each node received, by name.
pub fn served(nodes: &[Node]) -> HashMap<&'static str, u64> {
    nodes.iter().map(|n| (n.name, n.served())).collect()
}
