//! The placement tests' mock model servers in explicit mode
//! (`tests/balance/placement.rs`): 404 for a model until it is loaded through a
//! loader that plays the repository API, loads that succeed, fail or
//! hang, each call counted; and a balancer over them with placement on.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::task::JoinSet;
use tower::discover::ServiceList;
use tower::{Service, ServiceExt};
use tower_model_balance::backend::BackendId;
use tower_model_balance::balance::{
    Backend, BackendMeta, BackgroundTask, BalanceConfig, ModelBalancer,
};
use tower_model_balance::endpoint::Origin;
use tower_model_balance::health::probe::{ProbeError, ProbeTarget};
use tower_model_balance::placement::{LoadError, ModelLoader, PlacementConfig, Repository};
use tower_model_balance::route::ModelId;

pub const LOAD_TIME: Duration = Duration::from_millis(300);
pub const SERVE_TIME: Duration = Duration::from_millis(10);

/// How a server's loads go.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Loads {
    Succeed,
    Fail,
    Hang,
}

/// One mock server's state, shared by its endpoint and the loader.
#[derive(Debug)]
pub struct Server {
    pub loaded: HashSet<String>,
    pub loads: Loads,
    /// Load calls received, by model.
    pub load_calls: HashMap<String, u32>,
    /// Load calls in flight now and at most, by model.
    pub loading: HashMap<String, u32>,
    pub max_loading: HashMap<String, u32>,
    pub unloads: Vec<String>,
    pub served: u64,
    /// The repository index answers 503 (the server not in explicit
    /// mode, or not up yet): its repository is never read.
    pub index_down: bool,
}

#[derive(Clone, Debug)]
pub struct Fleet {
    pub servers: Arc<Mutex<HashMap<String, Server>>>,
    /// The repository every server shares.
    pub repository: Arc<Vec<String>>,
}

impl Fleet {
    pub fn new(names: &[&str], repository: &[&str]) -> Self {
        let servers = names
            .iter()
            .map(|n| {
                let server = Server {
                    loaded: HashSet::new(),
                    loads: Loads::Succeed,
                    load_calls: HashMap::new(),
                    loading: HashMap::new(),
                    max_loading: HashMap::new(),
                    unloads: Vec::new(),
                    served: 0,
                    index_down: false,
                };
                (n.to_string(), server)
            })
            .collect();
        Self {
            servers: Arc::new(Mutex::new(servers)),
            repository: Arc::new(repository.iter().map(|m| m.to_string()).collect()),
        }
    }

    pub fn with<T>(&self, name: &str, f: impl FnOnce(&mut Server) -> T) -> T {
        f(self.servers.lock().unwrap().get_mut(name).unwrap())
    }

    pub fn load_calls(&self, name: &str, model: &str) -> u32 {
        self.with(name, |s| s.load_calls.get(model).copied().unwrap_or(0))
    }

    pub fn total_load_calls(&self) -> u32 {
        let servers = self.servers.lock().unwrap();
        servers.values().flat_map(|s| s.load_calls.values()).sum()
    }

    pub fn endpoint(&self, name: &str) -> Endpoint {
        Endpoint {
            fleet: self.clone(),
            name: name.to_string(),
        }
    }

    /// A balancer over the servers, each with `slots` model slots and one
    /// owner per model.
    pub fn balancer(&self, names: &[&str], slots: usize) -> ModelBalancer<Endpoint> {
        let backends: Vec<_> = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let addr = format!("127.0.0.1:{}", 9000 + i).parse().unwrap();
                let meta = BackendMeta::new(BackendId::new(n).unwrap())
                    .with_address(Origin::http(addr))
                    .with_model_slots(slots)
                    .unwrap();
                Backend::with_meta(meta, self.endpoint(n))
            })
            .collect();
        let config = BalanceConfig::builder().owners(1).build().unwrap();
        ModelBalancer::new(ServiceList::new(backends), config).unwrap()
    }
}

/// A server's request endpoint: 404 for a model not loaded (explicit
/// mode), else 200 after `SERVE_TIME`.
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub fleet: Fleet,
    pub name: String,
}

impl Service<http::Request<String>> for Endpoint {
    type Response = http::Response<String>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<String>) -> Self::Future {
        let model = req.headers()["x-model-id"].to_str().unwrap().to_string();
        let loaded = self.fleet.with(&self.name, |s| {
            s.served += 1;
            s.loaded.contains(&model)
        });
        let path = req.uri().path().to_owned();
        Box::pin(async move {
            // What MLServer answers for a version it does not hold, and
            // FastAPI for a route it does not serve.
            let missing = match path.split_once("/versions/") {
                Some((_, v)) => Some(format!(
                    r#"{{"error":"Model {model} with version {v} not found"}}"#
                )),
                None if path == "/nope" => Some(r#"{"detail":"Not Found"}"#.to_owned()),
                None => None,
            };
            if let Some(body) = missing {
                let mut rsp = http::Response::new(body);
                *rsp.status_mut() = http::StatusCode::NOT_FOUND;
                return Ok(rsp);
            }
            if !loaded {
                let mut rsp = http::Response::new(format!("model '{model}' is not found"));
                *rsp.status_mut() = http::StatusCode::NOT_FOUND;
                return Ok(rsp);
            }
            tokio::time::sleep(SERVE_TIME).await;
            Ok(http::Response::new(String::new()))
        })
    }
}

/// Loads through the fleet's state, as a repository API would.
#[derive(Clone, Debug)]
pub struct Loader(pub Fleet);

impl ModelLoader for Loader {
    fn load(
        &self,
        target: &ProbeTarget,
        model: &ModelId,
    ) -> impl Future<Output = Result<(), LoadError>> + Send + 'static {
        let (fleet, name, model) = (self.0.clone(), target.id.to_string(), model.to_string());
        async move {
            let loads = fleet.with(&name, |s| {
                *s.load_calls.entry(model.clone()).or_default() += 1;
                let now = s.loading.entry(model.clone()).or_default();
                *now += 1;
                let now = *now;
                let max = s.max_loading.entry(model.clone()).or_default();
                *max = (*max).max(now);
                s.loads
            });
            let result = match loads {
                Loads::Hang => std::future::pending().await,
                Loads::Fail => {
                    tokio::time::sleep(LOAD_TIME).await;
                    Err(ProbeError::Status(http::StatusCode::INTERNAL_SERVER_ERROR))
                }
                Loads::Succeed => {
                    tokio::time::sleep(LOAD_TIME).await;
                    fleet.with(&name, |s| s.loaded.insert(model.clone()));
                    Ok(())
                }
            };
            fleet.with(&name, |s| *s.loading.get_mut(&model).unwrap() -= 1);
            result
        }
    }

    fn unload(
        &self,
        target: &ProbeTarget,
        model: &ModelId,
    ) -> impl Future<Output = Result<(), LoadError>> + Send + 'static {
        let (fleet, name, model) = (self.0.clone(), target.id.to_string(), model.to_string());
        async move {
            fleet.with(&name, |s| {
                s.loaded.remove(&model);
                s.unloads.push(model);
            });
            Ok(())
        }
    }

    fn repository(
        &self,
        target: &ProbeTarget,
    ) -> impl Future<Output = Result<Repository, LoadError>> + Send + 'static {
        let (fleet, name) = (self.0.clone(), target.id.to_string());
        async move {
            let ids = |names: &mut dyn Iterator<Item = &String>| {
                names.map(|m| ModelId::new(m).unwrap()).collect::<Vec<_>>()
            };
            if fleet.with(&name, |s| s.index_down) {
                return Err(ProbeError::Status(http::StatusCode::SERVICE_UNAVAILABLE));
            }
            let known = ids(&mut fleet.repository.iter());
            let resident = fleet.with(&name, |s| {
                let mut loaded: Vec<_> = s.loaded.iter().cloned().collect();
                loaded.sort();
                ids(&mut loaded.iter())
            });
            Ok(Repository::new(known, resident))
        }
    }
}

pub fn request(model: &str) -> http::Request<String> {
    request_to("/infer", model)
}

/// A request for `model` on `path`.
pub fn request_to(path: &str, model: &str) -> http::Request<String> {
    http::Request::post(path)
        .header("x-model-id", model)
        .body(String::new())
        .unwrap()
}

pub fn policy() -> PlacementConfig {
    PlacementConfig::builder()
        .load_timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

pub type Answer = Result<http::Response<String>, tower::BoxError>;

/// Sends `n` requests for `model` at once; their answers, bodies read.
pub async fn burst(balancer: &ModelBalancer<Endpoint>, model: &str, n: usize) -> Vec<Answer> {
    let mut tasks = JoinSet::new();
    for _ in 0..n {
        let b = balancer.clone();
        let req = request(model);
        tasks.spawn(async move {
            match b.oneshot(req).await {
                Ok(rsp) => Ok(read(rsp).await),
                Err(error) => Err(error),
            }
        });
    }
    let mut out = Vec::new();
    while let Some(answer) = tasks.join_next().await {
        out.push(answer.unwrap());
    }
    out
}

/// The response with its body read to its end (its outcome recorded),
/// as text.
pub async fn read<B: http_body::Body>(rsp: http::Response<B>) -> http::Response<String> {
    use http_body_util::BodyExt;
    let (parts, body) = rsp.into_parts();
    let bytes = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => Default::default(),
    };
    http::Response::from_parts(parts, String::from_utf8_lossy(&bytes).into_owned())
}

pub fn owner(balancer: &ModelBalancer<Endpoint>, model: &str) -> String {
    let owners = balancer.handle().owners(&ModelId::new(model).unwrap());
    assert_eq!(owners.len(), 1, "one owner per model");
    owners[0].to_string()
}

/// A balancer over the fleet's servers with `slots` model slots each,
/// placement on under `policy`; its task lives as long as the tuple.
pub fn placed(
    slots: usize,
    policy: PlacementConfig,
) -> (Fleet, ModelBalancer<Endpoint>, BackgroundTask) {
    let fleet = Fleet::new(&NAMES, &REPOSITORY);
    let balancer = fleet.balancer(&NAMES, slots);
    let task = balancer
        .handle()
        .enable_placement(Loader(fleet.clone()), policy)
        .unwrap();
    (fleet, balancer, task)
}

pub const NAMES: [&str; 3] = ["gpu-a", "gpu-b", "gpu-c"];
pub const REPOSITORY: [&str; 12] = [
    "m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9", "m10", "m11",
];
