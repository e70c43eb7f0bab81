//! The admission tests' backends (`tests/balance/admit.rs`): each answers a
//! status after a fixed latency on Tokio's clock and counts what it holds;
//! and the requests and results the tests send and read.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use tokio::time::Instant;
use tower::discover::ServiceList;
use tower::{BoxError, Service, ServiceExt};
use tower_model_balance::backend::BackendId;
use tower_model_balance::balance::{AdmissionConfig, Backend, BalanceConfig};
use tower_model_balance::error::Overloaded;

/// How many requests one backend holds now, and the most it held.
#[derive(Debug, Default)]
pub struct Held {
    pub now: AtomicUsize,
    pub peak: AtomicUsize,
}

pub type Reply = http::Response<Full<Bytes>>;

/// A backend that answers `status` after `latency`, counting what it holds.
#[derive(Clone)]
pub struct Gpu {
    held: Arc<Held>,
    status: Arc<AtomicUsize>,
    latency: Duration,
}

impl Service<http::Request<String>> for Gpu {
    type Response = Reply;
    type Error = BoxError;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<Reply, BoxError>> + Send>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: http::Request<String>) -> Self::Future {
        let gpu = self.clone();
        Box::pin(async move {
            let now = gpu.held.now.fetch_add(1, Ordering::SeqCst) + 1;
            gpu.held.peak.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(gpu.latency).await;
            gpu.held.now.fetch_sub(1, Ordering::SeqCst);
            let status = gpu.status.load(Ordering::SeqCst) as u16;
            let mut reply = Reply::new(Full::from("ok"));
            *reply.status_mut() = http::StatusCode::from_u16(status)?;
            Ok(reply)
        })
    }
}

/// `n` backends that each answer `status` after `latency`.
pub fn fleet(
    n: usize,
    latency: Duration,
    status: Arc<AtomicUsize>,
) -> (Vec<Arc<Held>>, ServiceList<Vec<Backend<Gpu>>>) {
    let held: Vec<Arc<Held>> = (0..n).map(|_| Arc::default()).collect();
    let backends = held
        .iter()
        .enumerate()
        .map(|(i, held)| {
            let gpu = Gpu {
                held: held.clone(),
                status: status.clone(),
                latency,
            };
            Backend::new(BackendId::new(&format!("gpu-{i}")).unwrap(), gpu)
        })
        .collect();
    (held, ServiceList::new(backends))
}

pub fn ok() -> Arc<AtomicUsize> {
    Arc::new(AtomicUsize::new(200))
}

pub fn request(model: &str, kind: &str, urgency: &str) -> http::Request<String> {
    http::Request::post("/infer")
        .header("x-model-id", model)
        .header("x-request-kind", kind)
        .header("x-urgency", urgency)
        .body(String::new())
        .unwrap()
}

/// Sends `req` through a clone of `balancer` in a task; its result and
/// when it resolved.
pub fn send<S, B>(
    balancer: &S,
    req: http::Request<String>,
) -> tokio::task::JoinHandle<(Result<(), BoxError>, Instant)>
where
    S: Service<http::Request<String>, Response = http::Response<B>, Error = BoxError>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let balancer = balancer.clone();
    tokio::spawn(async move {
        let result = match balancer.oneshot(req).await {
            // Read to its end: the balancer records the outcome there.
            Ok(response) => response
                .into_body()
                .collect()
                .await
                .map(drop)
                .map_err(Into::into),
            Err(e) => Err(e),
        };
        (result, Instant::now())
    })
}

pub fn overloaded(result: &Result<(), BoxError>) -> Option<&Overloaded> {
    result.as_ref().err()?.downcast_ref::<Overloaded>()
}

/// A sent request's task: its result and when it resolved.
pub type Sent = Result<(Result<(), BoxError>, Instant), tokio::task::JoinError>;

/// How many of the tasks' results are `Overloaded`.
pub fn count_shed(results: &[Sent]) -> usize {
    results
        .iter()
        .filter(|r| overloaded(&r.as_ref().unwrap().0).is_some())
        .count()
}

pub fn config(admission: AdmissionConfig) -> BalanceConfig {
    BalanceConfig::builder()
        .admission(admission)
        .build()
        .unwrap()
}

pub const MS: Duration = Duration::from_millis(1);
