//! The background task that probes a balancer's backends and reports the
//! answers to it.

use std::sync::{Arc, Weak};

use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::util::rng::{HasherRng, Rng};

use super::start::sleep_or_gone;
use crate::backend::BackendId;
use crate::balance::state::shared::View;
use crate::balance::state::table::Table;
use crate::classify::Outcome;
use crate::health::probe::{warn, ProbeConfig, ProbeError, ProbeReport, ProbeTarget, Prober};
use crate::route::ModelId;
use crate::task::BackgroundTask;

pub(crate) fn spawn<P: Prober>(
    runtime: &tokio::runtime::Handle,
    view: &Arc<dyn View>,
    prober: P,
    config: ProbeConfig,
) -> BackgroundTask {
    let gone = view.gone();
    let view = Arc::downgrade(view);
    super::start::spawn_held(
        runtime,
        run(view, gone, prober, config, HasherRng::default()),
    )
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
                    record(&view.table(), &target.id, answer.as_ref());
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

/// Records a probe's `answer` for `backend` (health, and the resident
/// models it lists); false if no backend of `table` has that ID.
pub(crate) fn record(
    table: &Table,
    backend: &BackendId,
    answer: Result<&ProbeReport, &ProbeError>,
) -> bool {
    let Some(state) = table.backends.iter().find(|b| &b.id == backend) else {
        return false;
    };
    let now = Instant::now();
    match answer {
        Ok(report) => {
            let outcome = match report.is_failure() {
                true => Outcome::Failure,
                false => Outcome::Success,
            };
            state.health.record_probe(outcome, Some(report.load), now);
            if let Some(models) = &report.resident_models {
                let at = table.fleet.millis(now);
                state.residency.sync(models.iter().map(ModelId::hash64), at);
            }
        }
        Err(_) => state.health.record_probe(Outcome::Failure, None, now),
    }
    true
}
