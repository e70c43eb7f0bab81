//! What every backend of one balancer shares: the settings copied from
//! the config, the gauges the panic threshold and the handle read, the
//! pair breakers, on-demand placement, the models' work.

use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

use crate::balance::config::admission::AdmissionConfig;
use crate::balance::config::fields::{BalanceConfig, BreakerScope, ResidencyHeader};
use crate::balance::state::demand::Work;
use crate::balance::state::placement::Placement;
use crate::balance::state::queue::WaitQueue;
use crate::balance::state::scoped::Scoped;
use crate::balance::state::traffic::FleetTraffic;
use crate::breaker::events::Hook;
use crate::classify::timing::StopPoint;
use crate::classify::Classifier;
use crate::health::HealthConfig;

/// What every backend of one balancer shares (each holds it by `Arc`).
#[derive(Debug)]
pub(crate) struct Fleet {
    /// What the config says, as the backends read it.
    pub(crate) settings: Settings,
    /// Counts over every backend.
    pub(crate) gauges: Gauges,
    /// Origin of the millisecond stamps in residency tables.
    pub(crate) base: Instant,
    /// The (backend, model) pair breakers, in `BackendModel` scope.
    pub(crate) scoped: Option<Scoped>,
    /// On-demand placement, once enabled.
    pub(crate) placement: OnceLock<Arc<Placement>>,
    /// Latency of each model's warm requests against the mean: its work.
    pub(crate) work: Work,
    /// Requests waiting for room under admission.
    pub(crate) queue: WaitQueue,
    /// The next backend state's
    /// [`BackendState::uid`](crate::balance::state::backend::BackendState::uid).
    pub(crate) next_uid: AtomicU64,
}

/// The part of the config the backends read, copied once.
#[derive(Debug, Default)]
pub(crate) struct Settings {
    /// Told of the backend breakers' transitions.
    pub(crate) breaker_hook: Option<Hook>,
    /// How health is scored.
    pub(crate) health: HealthConfig,
    /// Time constant of an idle backend's latency estimate.
    pub(crate) latency_decay: Duration,
    /// The response header residency is learned from.
    pub(crate) residency_header: Option<ResidencyHeader>,
    /// What a response's outcome is read from.
    pub(crate) classifier: Classifier,
    /// Per-backend admission, if on.
    pub(crate) admission: Option<AdmissionConfig>,
    /// Where a call's latency stops for its breaker, health and estimate.
    pub(crate) stop_point: StopPoint,
    /// What each backend's prefix cache holds, if routed by it.
    #[cfg(feature = "kv-events")]
    pub(crate) kv_index: Option<crate::kv::KvIndex>,
}

/// Counts over every backend of one balancer, kept up to date by the
/// backends' states, discovery and the health task; the panic threshold
/// and the handle read them.
#[derive(Debug, Default)]
pub(crate) struct Gauges {
    /// Requests picked by branch and finished.
    pub(crate) traffic: FleetTraffic,
    /// Backends whose breaker is open or half-open.
    pub(crate) not_closed: Arc<AtomicUsize>,
    /// Inserts discovery made that were ignored (duplicate ID, ring point
    /// limit).
    pub(crate) ignored: AtomicU64,
    /// Backends ejected by health at the last evaluation.
    pub(crate) ejected: AtomicUsize,
    /// Backends that asked to be ejected at the last evaluation and that
    /// the ejection cap kept in: unhealthy for the panic threshold.
    pub(crate) held: AtomicUsize,
    /// Backend states marked removed and not yet dropped (some may be in
    /// no table any more): with `not_closed` and `ejected`, a bound on the
    /// backends of a table that are not eligible.
    pub(crate) removed: AtomicUsize,
}

impl Gauges {
    /// Backends out for the panic threshold: a breaker not closed, or
    /// ejected by health, or held in by the ejection cap (the counts may
    /// overlap).
    pub(crate) fn out(&self) -> usize {
        use std::sync::atomic::Ordering::Relaxed;
        self.not_closed.load(Relaxed) + self.ejected.load(Relaxed) + self.held.load(Relaxed)
    }
}

impl Settings {
    fn of(config: &BalanceConfig) -> Self {
        Self {
            breaker_hook: config.breaker_hook.clone(),
            health: config.health.clone(),
            latency_decay: config.latency_decay,
            residency_header: config.residency_header.clone(),
            classifier: config.classifier.clone(),
            admission: config.admission.clone(),
            stop_point: config.stop_point,
            #[cfg(feature = "kv-events")]
            kv_index: config.kv_index.clone(),
        }
    }
}

impl Fleet {
    /// A fleet with one breaker per backend and the default settings.
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        Self::with(
            None,
            Settings {
                latency_decay: crate::balance::config::fields::DEFAULT_LATENCY_DECAY,
                ..Settings::default()
            },
        )
    }

    /// A fleet with the settings and the breakers `config` gives.
    pub(crate) fn for_config(config: &BalanceConfig) -> Self {
        let scoped = match config.breaker_scope {
            BreakerScope::Backend => None,
            BreakerScope::BackendModel { max_pairs } => {
                Some(Scoped::new(config.breaker.clone(), max_pairs))
            }
        };
        Self::with(scoped, Settings::of(config))
    }

    fn with(scoped: Option<Scoped>, settings: Settings) -> Self {
        let capacity = settings.admission.as_ref().map_or(0, |a| a.queue_capacity);
        Self {
            queue: WaitQueue::new(capacity),
            settings,
            gauges: Gauges::default(),
            base: Instant::now(),
            scoped,
            placement: OnceLock::new(),
            work: Work::new(),
            next_uid: AtomicU64::new(0),
        }
    }
    /// Per-backend admission, if on: the one source of its settings (the
    /// config's, copied once).
    #[inline]
    pub(crate) fn admission(&self) -> Option<&AdmissionConfig> {
        self.settings.admission.as_ref()
    }

    /// On-demand placement, once enabled.
    #[inline]
    pub(crate) fn placement(&self) -> Option<&Arc<Placement>> {
        self.placement.get()
    }

    /// Milliseconds from the fleet's base to `now`.
    pub(crate) fn millis(&self, now: Instant) -> u64 {
        // Not `as_millis`: its u128 arithmetic shows on the pick path.
        let since = now.saturating_duration_since(self.base);
        since
            .as_secs()
            .saturating_mul(1_000)
            .saturating_add(u64::from(since.subsec_millis()))
    }
}
