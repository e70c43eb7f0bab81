//! What hedging costs a request that does not hedge, against tower's own
//! `hedge::Hedge`.
//!
//! Group `hedge`, one row each:
//!
//! * `direct`: the always-ready endpoint alone — the floor;
//! * `layer_idle`: through this crate's `HedgeLayer`, armed (no minimum of
//!   samples: every request is copied, carries a slot and has a delay), the
//!   endpoint answering before the delay, so it never fires;
//! * `tower_hedge_armed`: through tower's `hedge::Hedge` armed likewise (no
//!   minimum of data points, p95 over a 10 s period), never firing;
//! * `layer_timer` and `tower_hedge_timer`: the same two over an endpoint
//!   whose answer is pending at its first poll, so that both arm their
//!   timer (this crate's layer arms none for an answer ready at once).
//!
//! Every row does `ready().await`, `call(req).await` and drops the response
//! for inference requests over 16 model IDs, built outside the timed region
//! in chunks of 1024, on a current-thread runtime of its own. After the
//! group a table gives the median ns per request of each row's samples in
//! this run and the ratio the done-when names: `layer_idle ÷
//! tower_hedge_armed` (target ≤ 0.5), and the same for the timer rows.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use criterion::{black_box, Criterion};
use http_body_util::Empty;
use tokio::runtime::Runtime;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};
use tower_model_balance::hedge::{HedgeConfig, HedgeLayer};
use tower_model_balance_test_support::ready;

use ready::{request, Ready};

const GROUP: &str = "hedge";
const CHUNK: usize = 1024;

type Req = http::Request<()>;

/// tower's hedge policy: every request may be copied and hedged.
#[derive(Clone, Copy, Debug)]
struct Always;

impl tower::hedge::Policy<Req> for Always {
    fn clone_request(&self, req: &Req) -> Option<Req> {
        Some(req.clone())
    }

    fn can_retry(&self, _: &Req) -> bool {
        true
    }
}

/// An endpoint whose answer is pending once (it wakes itself), then ready.
#[derive(Clone, Copy, Debug)]
struct YieldOnce;

struct Yielded(bool);

impl Future for Yielded {
    type Output = Result<http::Response<Empty<Bytes>>, std::convert::Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.0 {
            return Poll::Ready(Ok(http::Response::new(Empty::new())));
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl Service<Req> for YieldOnce {
    type Response = http::Response<Empty<Bytes>>;
    type Error = std::convert::Infallible;
    type Future = Yielded;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Req) -> Self::Future {
        Yielded(false)
    }
}

fn layer() -> HedgeLayer {
    HedgeLayer::new(
        HedgeConfig::builder()
            .min_samples(0)
            .build()
            .expect("valid"),
    )
}

fn tower_hedge<S>(inner: S) -> tower::hedge::Hedge<S, Always>
where
    S: Service<Req> + Clone,
    S::Error: Into<tower::BoxError>,
{
    tower::hedge::Hedge::new::<Req>(inner, Always, 0, 0.95, Duration::from_secs(10))
}

/// Sends `iters` requests through `svc`, one at a time; the time spent
/// sending (request building excluded).
async fn drive<S>(svc: &mut S, iters: u64) -> Duration
where
    S: Service<Req>,
    S::Error: Debug,
{
    let mut requests = Vec::with_capacity(CHUNK);
    let mut elapsed = Duration::ZERO;
    let mut sent = 0;
    while sent < iters {
        let len = (iters - sent).min(CHUNK as u64) as usize;
        requests.extend((0..len).map(|i| request(&format!("model-{}", i % 16), "inference")));
        let start = Instant::now();
        for req in requests.drain(..) {
            svc.ready().await.expect("never fails");
            black_box(svc.call(req).await.expect("never fails"));
        }
        elapsed += start.elapsed();
        sent += len as u64;
    }
    elapsed
}

/// Each row's samples of at least one chunk, in ns per request.
type Samples = RefCell<BTreeMap<&'static str, Vec<f64>>>;

fn row<S>(c: &mut Criterion, samples: &Samples, name: &'static str, mut svc: S)
where
    S: Service<Req>,
    S::Error: Debug,
{
    let rt: Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut group = c.benchmark_group(GROUP);
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let elapsed = rt.block_on(drive(&mut svc, iters));
            if iters >= CHUNK as u64 {
                let ns = elapsed.as_nanos() as f64 / iters as f64;
                samples.borrow_mut().entry(name).or_default().push(ns);
            }
            elapsed
        })
    });
    group.finish();
}

fn median(samples: &Samples, row: &str) -> Option<f64> {
    let mut ns = samples.borrow().get(row)?.clone();
    ns.sort_by(f64::total_cmp);
    Some(ns[ns.len() / 2])
}

fn report(samples: &Samples) {
    if samples.borrow().is_empty() {
        return;
    }
    println!("\n{GROUP}: ns per request, median of this run's samples");
    for name in [
        "direct",
        "layer_idle",
        "tower_hedge_armed",
        "layer_timer",
        "tower_hedge_timer",
    ] {
        let cell = median(samples, name).map_or_else(|| "-".to_owned(), |ns| format!("{ns:.1}"));
        println!("  {name:<44}{cell:>12}");
    }
    for (a, b) in [
        ("layer_idle", "tower_hedge_armed"),
        ("layer_timer", "tower_hedge_timer"),
    ] {
        let cell = match (median(samples, a), median(samples, b)) {
            (Some(x), Some(y)) => {
                let verdict = if x / y <= 0.5 { "ok" } else { "MISS" };
                format!("{:.3} {verdict}", x / y)
            }
            _ => "-".to_owned(),
        };
        println!("  {:<44}{cell:>12}", format!("{a} ÷ {b} (≤ 0.5)"));
    }
}

fn main() {
    let samples = Samples::default();
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    row(&mut c, &samples, "direct", Ready);
    row(&mut c, &samples, "layer_idle", layer().layer(Ready));
    row(&mut c, &samples, "tower_hedge_armed", tower_hedge(Ready));
    row(&mut c, &samples, "layer_timer", layer().layer(YieldOnce));
    row(
        &mut c,
        &samples,
        "tower_hedge_timer",
        tower_hedge(YieldOnce),
    );
    c.final_summary();
    report(&samples);
}
