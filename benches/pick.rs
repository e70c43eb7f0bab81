//! Per-request cost of routing: the model-aware balancer against the
//! baselines a user would pick instead — a direct call to one endpoint, and
//! tower's `balance::p2c::Balance` — measured side by side in one run over
//! 8 always-ready endpoints, and reported as ratios to the direct call.

#[path = "../tests/support/ready.rs"]
mod ready;

use std::future::Future;
use std::path::PathBuf;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use criterion::{black_box, Criterion};
use tower::balance::p2c::Balance;
use tower::discover::ServiceList;
use tower::load::{CompleteOnResponse, PendingRequestsDiscover};
use tower::Service;
use tower_model_balance::backend::BackendId;
use tower_model_balance::balance::{Backend, BalanceConfig, ModelBalancer};

use ready::{request, Ready};

const BACKENDS: usize = 8;
const GROUP: &str = "pick";

/// Drives one request through `svc` to its response, as a caller would.
fn send<S: Service<http::Request<()>>>(svc: &mut S, req: http::Request<()>) -> bool
where
    S::Error: std::fmt::Debug,
{
    let mut cx = Context::from_waker(Waker::noop());
    assert!(svc.poll_ready(&mut cx).is_ready());
    let fut = pin!(svc.call(req));
    matches!(fut.poll(&mut cx), Poll::Ready(Ok(_)))
}

fn bench(c: &mut Criterion) {
    let models: Vec<String> = (0..32).map(|i| format!("model-{i:02}")).collect();
    let mut group = c.benchmark_group(GROUP);
    let mut i = 0usize;
    let mut next = move || {
        i = (i + 1) % 32;
        i
    };

    let mut direct = Ready;
    group.bench_function("direct", |b| {
        b.iter(|| black_box(send(&mut direct, request(&models[next()], "inference"))))
    });

    let list = ServiceList::new(vec![Ready; BACKENDS]);
    let mut p2c = Balance::new(PendingRequestsDiscover::new(
        list,
        CompleteOnResponse::default(),
    ));
    group.bench_function("tower_p2c", |b| {
        b.iter(|| black_box(send(&mut p2c, request(&models[next()], "inference"))))
    });

    let backends =
        (0..BACKENDS).map(|i| Backend::new(BackendId::new(&format!("b{i}")).unwrap(), Ready));
    let mut balancer = ModelBalancer::new(
        ServiceList::new(backends.collect::<Vec<_>>()),
        BalanceConfig::default(),
    )
    .expect("a list source needs no runtime");
    group.bench_function("model_balancer_inference", |b| {
        b.iter(|| black_box(send(&mut balancer, request(&models[next()], "inference"))))
    });
    group.bench_function("model_balancer_update", |b| {
        b.iter(|| black_box(send(&mut balancer, request(&models[next()], "update"))))
    });
    group.finish();
}

/// Mean time of one benchmark from criterion's saved estimates, in ns.
fn mean_ns(name: &str) -> Option<f64> {
    let target =
        std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| PathBuf::from("target"), PathBuf::from);
    let path = target
        .join("criterion")
        .join(GROUP)
        .join(name)
        .join("new/estimates.json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    json["mean"]["point_estimate"].as_f64()
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
    let Some(direct) = mean_ns("direct") else {
        return;
    };
    println!("\nratio to a direct call (same run, {BACKENDS} ready endpoints):");
    for name in [
        "tower_p2c",
        "model_balancer_inference",
        "model_balancer_update",
    ] {
        if let Some(ns) = mean_ns(name) {
            println!("  {name:<26} {ns:>8.1} ns  {:>5.2}x", ns / direct);
        }
    }
}
