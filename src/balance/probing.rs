//! The background task that probes a balancer's backends and reports the
//! answers to it.

use std::sync::{Arc, Weak};

use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tower::util::rng::{HasherRng, Rng};

use super::handle::View;
use super::{sleep_or_gone, BalancerHandle};
use crate::health::probe::{warn, ProbeConfig, ProbeError, ProbeTarget, Prober};

/// A running prober of one balancer's backends: stops when dropped, or
/// once every clone and handle of the balancer is gone.
#[derive(Debug)]
#[must_use = "the probes stop when the task is dropped"]
pub struct ProbeTask {
    task: JoinHandle<()>,
}

impl ProbeTask {
    /// Whether the task has stopped (its balancer is gone).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}

impl Drop for ProbeTask {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub(crate) fn spawn<P: Prober>(view: &Arc<dyn View>, prober: P, config: ProbeConfig) -> ProbeTask {
    let gone = view.gone();
    let view = Arc::downgrade(view);
    ProbeTask {
        task: tokio::spawn(run(view, gone, prober, config, HasherRng::default())),
    }
}

/// Probes every backend with an address once a round, rounds an interval
/// (jittered) apart, until the balancer is gone.
async fn run<P: Prober>(
    view: Weak<dyn View>,
    mut gone: tokio::sync::watch::Receiver<()>,
    prober: P,
    config: ProbeConfig,
    mut rng: HasherRng,
) {
    let limit = Arc::new(Semaphore::new(config.concurrency));
    loop {
        let round = Instant::now();
        let Some(targets) = targets(&view) else {
            return;
        };
        let mut probes = JoinSet::new();
        for target in targets {
            let Ok(permit) = limit.clone().acquire_owned().await else {
                return;
            };
            let probe = prober.probe(&target);
            let (view, timeout) = (view.clone(), config.timeout);
            probes.spawn(async move {
                let answer = match tokio::time::timeout(timeout, probe).await {
                    Ok(answer) => answer,
                    Err(_) => Err(ProbeError::Timeout),
                };
                drop(permit);
                match &answer {
                    Err(error) => warn::failed(&target.id, "probe", error),
                    Ok(_) => warn::recovered(&target.id, "probe"),
                }
                if let Some(view) = view.upgrade() {
                    BalancerHandle::new(view).report_probe(&target.id, answer.as_ref());
                }
            });
        }
        while probes.join_next().await.is_some() {}
        let spread = 1.0 + config.jitter * (2.0 * rng.next_f64() - 1.0);
        if sleep_or_gone(round + config.interval.mul_f64(spread), &mut gone).await {
            return;
        }
    }
}

/// The current backends that have an address, or `None` once the balancer
/// is gone.
fn targets(view: &Weak<dyn View>) -> Option<Vec<ProbeTarget>> {
    let table = view.upgrade()?.table();
    let targets = table
        .backends
        .iter()
        .filter(|b| !b.is_removed())
        .filter_map(|b| b.health.probe_target(&b.id))
        .collect();
    Some(targets)
}
