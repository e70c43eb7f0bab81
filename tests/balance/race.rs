//! The balancer's in-flight counters under many racing tasks on a
//! multi-thread runtime, with requests cancelled at every await point:
//! whatever the interleaving, every count returns to zero and every
//! request that ran to its end is counted once. Driven by counts: each
//! request is polled a chosen number of times, then finished or dropped.

use crate::lcg;

use std::convert::Infallible;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use tower::discover::ServiceList;
use tower::{Service, ServiceExt};
use tower_model_balance::backend::{Backend, BackendId};
use tower_model_balance::balance::{BalanceConfig, BreakerScope, ModelBalancer};

use lcg::Lcg;

const TASKS: u64 = 16;
const REQUESTS: u64 = 2_000;

/// An endpoint whose answer takes `steps` polls (each returns `Pending`
/// once, waking itself), so a request has that many await points to be
/// cancelled at; one request in five fails (500).
#[derive(Clone)]
struct Stepped {
    served: Arc<AtomicU64>,
}

struct Steps {
    left: u32,
    fail: bool,
}

impl Future for Steps {
    type Output = Result<http::Response<Full<Bytes>>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.left == 0 {
            let mut rsp = http::Response::new(Full::new(Bytes::from_static(b"ok")));
            if self.fail {
                *rsp.status_mut() = http::StatusCode::INTERNAL_SERVER_ERROR;
            }
            return Poll::Ready(Ok(rsp));
        }
        self.left -= 1;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Service<http::Request<String>> for Stepped {
    type Response = http::Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Steps;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<String>) -> Steps {
        let n = self.served.fetch_add(1, Ordering::Relaxed);
        let steps = req.body().len() as u32;
        Steps {
            left: steps,
            fail: n.is_multiple_of(5),
        }
    }
}

/// A request for one of 40 models whose answer takes `steps` polls.
fn request(i: u64, steps: u32) -> http::Request<String> {
    let kind = if i.is_multiple_of(10) {
        "update"
    } else {
        "inference"
    };
    http::Request::post("/")
        .header("x-model-id", format!("model-{}", i % 40))
        .header("x-request-kind", kind)
        .body("s".repeat(steps as usize))
        .unwrap()
}

/// Polls `fut` at most `polls` times; its output if it finished.
fn poll_at_most<F: Future>(fut: Pin<&mut F>, polls: u32) -> Option<F::Output> {
    let mut cx = Context::from_waker(Waker::noop());
    let mut fut = fut;
    for _ in 0..polls {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return Some(out);
        }
    }
    None
}

/// One task's requests: each cancelled after a drawn number of polls of
/// its response future (0 = before the first), or of its body, or run to
/// the end. Returns how many ran to the end.
async fn run(balancer: ModelBalancer<Stepped, Lcg>, seed: u64) -> u64 {
    let mut rng = seed;
    let mut draw = |n: u64| {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (rng >> 33) % n
    };
    let mut finished = 0;
    // One clone per task, as a server's connection task holds: it times
    // only the requests in its sample, so both kinds of guard are raced.
    let mut svc = balancer;
    for i in 0..REQUESTS {
        let steps = draw(4) as u32;
        let fut = svc.ready().await.unwrap().call(request(i + seed, steps));
        let mut fut = pin!(fut);
        match draw(3) {
            // Cancelled while waiting for the response, at a drawn point.
            0 => {
                let polls = draw(u64::from(steps) + 1) as u32;
                drop(poll_at_most(fut.as_mut(), polls));
            }
            // Response taken, body dropped unread.
            1 => {
                if let Some(Ok(rsp)) = poll_at_most(fut.as_mut(), u32::MAX) {
                    drop(rsp);
                }
            }
            // Run to the end of the body.
            _ => {
                let rsp = fut.await;
                if let Ok(rsp) = rsp {
                    let _ = rsp.into_body().collect().await;
                    finished += 1;
                }
            }
        }
        // Let other tasks interleave.
        tokio::task::yield_now().await;
    }
    finished
}

async fn race(scope: BreakerScope) {
    let served = Arc::new(AtomicU64::new(0));
    let backends: Vec<_> = (0..6)
        .map(|i| {
            let endpoint = Stepped {
                served: served.clone(),
            };
            Backend::new(BackendId::new(&format!("gpu-{i}")).unwrap(), endpoint)
        })
        .collect();
    let config = BalanceConfig::builder()
        .breaker_scope(scope)
        .build()
        .unwrap();
    let balancer = ModelBalancer::from_rng(ServiceList::new(backends), config, Lcg(9)).unwrap();
    let handle = balancer.handle();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| tokio::spawn(run(balancer.clone(), t * 7919)))
        .collect();
    let mut finished = 0;
    for task in tasks {
        finished += task.await.unwrap();
    }
    assert!(finished > 0);
    assert_eq!(handle.in_flight(), 0, "every request counted out");
    for backend in handle.backends() {
        assert_eq!(backend.in_flight, 0, "{}", backend.id);
    }
    let stats = handle.stats();
    let routed = stats.resident_owner + stats.cold_owner + stats.spill + stats.panic + stats.update;
    assert_eq!(
        routed + stats.no_backend,
        TASKS * REQUESTS,
        "each request counted once, in one branch"
    );
    let picked: u64 = handle.backends().iter().map(|b| b.picked).sum();
    assert_eq!(picked, routed, "each routed request picked one backend");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn counts_return_to_zero_under_racing_cancellations() {
    race(BreakerScope::Backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn counts_return_to_zero_with_per_model_breakers() {
    race(BreakerScope::BackendModel { max_pairs: 16 }).await;
}
