//! The hedging layer tests' scripted inner service (`tests/hedge/layer.rs`):
//! each call answers, fails or hangs as its step says, counting calls,
//! drops and readiness polls; and a request, a policy and a send through
//! the layer on paused time.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};
use tower_model_balance::error::BoxError;
use tower_model_balance::hedge::{HedgeConfig, HedgeConfigBuilder, HedgeLayer, HedgeStats};

pub type Req = http::Request<()>;
pub type Rsp = http::Response<&'static str>;

/// What one call does: answer `status` (or fail) after `after`; `None`:
/// never answers.
#[derive(Clone, Copy, Debug)]
pub struct Step {
    after: Option<Duration>,
    status: Result<u16, ()>,
}

pub fn ok_after(ms: u64) -> Step {
    Step {
        after: Some(Duration::from_millis(ms)),
        status: Ok(200),
    }
}

pub fn status_after(ms: u64, status: u16) -> Step {
    Step {
        after: Some(Duration::from_millis(ms)),
        status: Ok(status),
    }
}

pub fn error_after(ms: u64) -> Step {
    Step {
        after: Some(Duration::from_millis(ms)),
        status: Err(()),
    }
}

pub fn never() -> Step {
    Step {
        after: None,
        status: Ok(200),
    }
}

/// Calls made, answers completed and futures dropped before answering,
/// and readiness polls, shared by every clone.
#[derive(Debug, Default)]
pub struct Seen {
    pub calls: AtomicUsize,
    pub dropped: AtomicUsize,
    pub ready_polls: AtomicUsize,
}

/// Answers call `i` by `script[i]` (the last step repeats); each response
/// names its call in the body: `"0"`, `"1"`, ...
#[derive(Clone)]
pub struct Script {
    steps: Arc<Vec<Step>>,
    pub seen: Arc<Seen>,
}

impl Script {
    pub fn new(steps: Vec<Step>) -> (Self, Arc<Seen>) {
        let seen = Arc::new(Seen::default());
        (
            Self {
                steps: Arc::new(steps),
                seen: seen.clone(),
            },
            seen,
        )
    }
}

/// Counts its future dropped before it answered.
struct DropGuard(Arc<Seen>, bool);

impl Drop for DropGuard {
    fn drop(&mut self) {
        if !self.1 {
            self.0.dropped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Service<Req> for Script {
    type Response = Rsp;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Rsp, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.seen.ready_polls.fetch_add(1, Ordering::SeqCst);
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Req) -> Self::Future {
        let i = self.seen.calls.fetch_add(1, Ordering::SeqCst);
        let step = self.steps[i.min(self.steps.len() - 1)];
        let guard = DropGuard(self.seen.clone(), false);
        Box::pin(async move {
            // The whole guard moves in (not only the field set below).
            let mut guard = guard;
            let Some(after) = step.after else {
                std::future::pending::<()>().await;
                unreachable!()
            };
            tokio::time::sleep(after).await;
            guard.1 = true;
            let name: &'static str = ["0", "1", "2"][i.min(2)];
            match step.status {
                Ok(status) => Ok(http::Response::builder().status(status).body(name)?),
                Err(()) => Err(format!("call {i} failed").into()),
            }
        })
    }
}

pub fn request(kind: &str) -> Req {
    http::Request::post("/infer")
        .header("x-model-id", "llama")
        .header("x-request-kind", kind)
        .body(())
        .unwrap()
}

/// Hedges after 10 ms from the first request on (no minimum of samples, a
/// 10 ms floor and ceiling), with room in the budget.
pub fn policy() -> HedgeConfigBuilder {
    HedgeConfig::builder()
        .min_samples(0)
        .floor(Duration::from_millis(10))
        .ceiling(Duration::from_millis(10))
        .budget_ratio(1.0)
}

/// Sends one request through a layer over `steps` and lets paused time run
/// until it resolves.
pub async fn send(
    layer: &HedgeLayer,
    steps: Vec<Step>,
    kind: &str,
) -> (Result<Rsp, BoxError>, Arc<Seen>, Duration) {
    let (script, seen) = Script::new(steps);
    let start = Instant::now();
    let result = layer.layer(script).oneshot(request(kind)).await;
    (result, seen, start.elapsed())
}

pub fn body(result: &Result<Rsp, BoxError>) -> &'static str {
    result.as_ref().expect("a response").body()
}

/// The layer's counters, every request sent so far accounted once:
/// hedged, or not for one reason.
pub fn stats(layer: &HedgeLayer) -> HedgeStats {
    let s = layer.handle().stats();
    assert_eq!(
        s.requests,
        s.hedges + s.not_hedged(),
        "each request accounted: {s:?}"
    );
    s
}
