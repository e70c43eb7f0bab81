//! Backends the picks could starve or flood: one slow once and idle since,
//! one that joins during a burst, a fleet whose every backend is unhealthy.
//! Pick API on Tokio's paused clock; the balancer's health task runs on it.

#[path = "support/lcg.rs"]
mod lcg;

use std::time::Duration;

use std::convert::Infallible;
use tokio::time::Instant;

use futures_util::stream;
use tower::discover::{Change, Discover};
use tower_model_balance::backend::BackendId;
use tower_model_balance::balance::{Backend, BalanceConfig, ModelBalancer, Picked};
use tower_model_balance::breaker::Outcome;
use tower_model_balance::route::{ModelId, RequestKind, RouteInfo};

use lcg::Lcg;

/// Latency of a normal answer.
const ANSWER: Duration = Duration::from_millis(30);

fn update() -> RouteInfo {
    RouteInfo::new(ModelId::new("m").unwrap()).with_kind(RequestKind::Update)
}

/// A discovery source that has `names` ready and ends.
fn backends(
    names: &[&str],
) -> impl Discover<Key = usize, Service = Backend<String>, Error = Infallible> + Send + 'static {
    let changes: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let backend = Backend::new(BackendId::new(n).unwrap(), n.to_string());
            Ok(Change::Insert(i, backend))
        })
        .collect();
    stream::iter(changes)
}

/// Finishes every pick `latency` after now.
fn finish_all(picks: Vec<Picked<String>>, latency: Duration) {
    let at = Instant::now() + latency;
    for p in picks {
        p.guard.finish_at(Outcome::Success, at);
    }
}

/// Lets the balancer's background tasks run for `d` of paused time.
async fn run_for(d: Duration) {
    tokio::time::advance(d).await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

/// One slow answer (a long generation, a cold load) raises a backend's
/// latency estimate a hundredfold. Idle since, it is still picked again
/// within the documented bound: the estimate relaxes toward the fleet's
/// median with the latency decay (10 s), and under a burst (5 requests
/// in flight on each rival) P2C takes it once it is within 5× the
/// median: `10 s × ln(3 994 / 120) ≈ 35 s`, plus a health interval.
#[tokio::test(start_paused = true)]
async fn a_backend_slow_once_gets_traffic_again_in_bounded_time() {
    let config = BalanceConfig::default();
    let mut balancer = ModelBalancer::from_rng(backends(&["a", "b", "c"]), config, Lcg(7)).unwrap();
    // Every estimate learns the normal answer.
    for _ in 0..60 {
        let picked = balancer.pick(&update(), Instant::now()).unwrap();
        finish_all(vec![picked], ANSWER);
    }
    // One answer from `a` takes 20 s.
    let slow = loop {
        let picked = balancer.pick(&update(), Instant::now()).unwrap();
        if picked.backend().as_str() == "a" {
            break picked;
        }
        finish_all(vec![picked], ANSWER);
    };
    finish_all(vec![slow], Duration::from_secs(20));

    // Bursts of 10 requests held at once, one a second.
    let mut first_back = None;
    for second in 0..60u32 {
        let burst: Vec<_> = (0..10)
            .map(|_| balancer.pick(&update(), Instant::now()).unwrap())
            .collect();
        let on_a = burst.iter().filter(|p| p.backend().as_str() == "a").count();
        finish_all(burst, ANSWER);
        if on_a > 0 {
            first_back = Some(second);
            break;
        }
        run_for(Duration::from_secs(1)).await;
    }
    let second = first_back.expect("the backend slow once was never picked again in 60 s");
    assert!(
        (30..=37).contains(&second),
        "picked again after {second} s, outside the bound"
    );
}
