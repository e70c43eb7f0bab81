//! What the starvation tests share: picks finished on Tokio's paused
//! clock, and the balancer's background tasks given time to run.

use std::convert::Infallible;
use std::time::Duration;

use tokio::time::Instant;
use tower::discover::{Change, Discover};
use tower_model_balance::backend::{Backend, BackendId};
use tower_model_balance::balance::Picked;
use tower_model_balance::classify::Outcome;
use tower_model_balance::route::{ModelId, RequestKind, RouteInfo};

/// Latency of a normal answer.
pub const ANSWER: Duration = Duration::from_millis(30);

/// An update of model `m`: P2C over every backend.
pub fn update() -> RouteInfo {
    let mut route = RouteInfo::new(ModelId::new("m").unwrap());
    route.kind = RequestKind::Update;
    route
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

/// Where a test sends discovery's changes.
pub type Changes = tokio::sync::mpsc::UnboundedSender<Change<usize, Backend<String>>>;

/// Two backends `a` and `b` as the balancer's discovery source, through a
/// channel (for removals and re-insertions).
pub fn channel_of_two() -> (
    Changes,
    impl Discover<Key = usize, Service = Backend<String>, Error = Infallible> + Send + 'static,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    for (i, name) in ["a", "b"].into_iter().enumerate() {
        tx.send(insert(i, name)).unwrap();
    }
    let source = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|c| (Ok::<_, Infallible>(c), rx))
    });
    (tx, source)
}

/// Backend `name` under discovery key `i`.
pub fn insert(i: usize, name: &str) -> Change<usize, Backend<String>> {
    Change::Insert(
        i,
        Backend::new(BackendId::new(name).unwrap(), name.to_string()),
    )
}
