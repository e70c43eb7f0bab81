//! What the starvation tests share: picks finished on Tokio's paused
//! clock, and the balancer's background tasks given time to run.

use std::time::Duration;

use tokio::time::Instant;
use tower_model_balance::balance::Picked;
use tower_model_balance::classify::Outcome;
use tower_model_balance::route::{ModelId, RequestKind, RouteInfo};

/// Latency of a normal answer.
pub const ANSWER: Duration = Duration::from_millis(30);

/// An update of model `m`: P2C over every backend.
pub fn update() -> RouteInfo {
    RouteInfo::new(ModelId::new("m").unwrap()).with_kind(RequestKind::Update)
}

/// Finishes every pick `latency` after now.
pub fn finish_all(picks: Vec<Picked<String>>, latency: Duration) {
    let at = Instant::now() + latency;
    for p in picks {
        p.guard.finish_at(Outcome::Success, at);
    }
}

/// Lets the balancer's background tasks run for `d` of paused time.
pub async fn run_for(d: Duration) {
    tokio::time::advance(d).await;
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}
