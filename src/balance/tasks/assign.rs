//! The assignment task: every [`INTERVAL`], gives the models in demand
//! their owners over the backends as they are now
//! ([`assign::plan`](crate::balance::state::assign::plan)), for the picks
//! to read.

use std::sync::Weak;
use std::time::Duration;

use tokio::time::Instant;

use super::start::sleep_or_gone;
use crate::balance::state::shared::View;

/// How often the models' owners are planned again: often enough that a
/// model whose demand grows, or a new backend table (each membership
/// change starts one with no assignment), has its owners within a
/// fraction of a second; the plan over a few thousand models takes about
/// a millisecond.
pub(crate) const INTERVAL: Duration = Duration::from_millis(250);

/// Plans the owners every [`INTERVAL`] until the balancer is gone.
pub(crate) async fn run(view: Weak<dyn View>, mut gone: tokio::sync::watch::Receiver<()>) {
    let mut last = Instant::now();
    loop {
        if sleep_or_gone(last + INTERVAL, &mut gone).await {
            return;
        }
        last = Instant::now();
        let Some(view) = view.upgrade() else {
            return;
        };
        view.reassign();
    }
}
