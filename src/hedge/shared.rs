//! What every clone of a hedging service shares: the delays, the budget,
//! the gate and the counters; and the handle that reads them.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::budget::Budget;
use super::config::HedgeConfig;
use super::delay::Delays;
use super::gate::LoadGate;
use crate::route::ModelId;

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) requests: AtomicU64,
    pub(crate) hedges: AtomicU64,
    pub(crate) won: AtomicU64,
    pub(crate) suppressed_budget: AtomicU64,
    pub(crate) suppressed_load: AtomicU64,
    pub(crate) suppressed_no_alternative: AtomicU64,
    pub(crate) after_failure: AtomicU64,
    pub(crate) in_time: AtomicU64,
    pub(crate) warming_up: AtomicU64,
    pub(crate) updates: AtomicU64,
    pub(crate) send_once: AtomicU64,
    pub(crate) uncopyable: AtomicU64,
    pub(crate) disabled: AtomicU64,
    pub(crate) unready: AtomicU64,
}

/// Why a request was given no backup when it was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unplanned {
    Update,
    SendOnce,
    Disabled,
    WarmingUp,
    Uncopyable,
}

impl Counters {
    pub(crate) fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request given no backup, by why.
    pub(crate) fn unplanned(&self, why: Unplanned) {
        Self::add(match why {
            Unplanned::Update => &self.updates,
            Unplanned::SendOnce => &self.send_once,
            Unplanned::Disabled => &self.disabled,
            Unplanned::WarmingUp => &self.warming_up,
            Unplanned::Uncopyable => &self.uncopyable,
        });
    }
}

pub(crate) struct Shared {
    pub(crate) policy: HedgeConfig,
    pub(crate) delays: Delays,
    pub(crate) budget: Arc<Budget>,
    pub(crate) gate: Option<Box<dyn LoadGate>>,
    pub(crate) counters: Counters,
    /// Set once a [`RetryPolicy`](super::RetryPolicy) was built from the
    /// layer: every request then carries a
    /// [`PickedSlot`](crate::backend::PickedSlot), so a retry knows which
    /// backend to avoid even when no backup is planned.
    pub(crate) retries: AtomicBool,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("policy", &self.policy)
            .field("budget", &self.budget)
            .field("gate", &self.gate.is_some())
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub(crate) fn new(policy: HedgeConfig, gate: Option<Box<dyn LoadGate>>) -> Self {
        let now = Instant::now();
        Self {
            delays: Delays::new(&policy, now),
            budget: Arc::new(Budget::new(
                policy.budget_ratio,
                policy.budget_min_per_sec,
                policy.budget_window,
                now,
            )),
            gate,
            counters: Counters::default(),
            retries: AtomicBool::new(false),
            policy,
        }
    }

    /// Whether a hedge may go now: the gate first (it costs no budget),
    /// then the budget. Counts a suppression.
    pub(crate) fn may_hedge(&self, now: Instant) -> bool {
        let c = &self.counters;
        if let Some(gate) = &self.gate {
            // Not under the threshold (a NaN included): no hedge — a
            // gate that cannot say fails closed.
            let utilization = gate.utilization();
            if utilization.is_nan() || utilization > self.policy.max_utilization {
                Counters::add(&c.suppressed_load);
                tracing::debug!(
                    utilization,
                    "hedge suppressed: fleet over its load threshold"
                );
                return false;
            }
        }
        if !self.budget.try_withdraw(now) {
            Counters::add(&c.suppressed_budget);
            tracing::debug!("hedge suppressed: budget spent");
            return false;
        }
        true
    }
}

/// Counters of a [`HedgeLayer`](super::HedgeLayer) and every service it
/// made, since it was built.
///
/// Every request is accounted once its response future is dropped: it
/// was hedged (`hedges`), or not, for one reason — suppressed
/// (`suppressed_by_budget`, `suppressed_by_load`,
/// `suppressed_by_no_alternative`), not needed (`ended_before_delay`),
/// never planned (`warming_up`, `updates`, `send_once`, `uncopyable`,
/// `disabled`), or
/// its backup could not be sent (`backup_unready`). So, with no request
/// in flight, `requests == hedges + not_hedged()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct HedgeStats {
    /// Requests received.
    pub requests: u64,
    /// Backup attempts sent (those sent after a fast failure included).
    pub hedges: u64,
    /// Requests whose backup's success was the response returned.
    pub hedges_won: u64,
    /// Backups not sent because the budget was spent.
    pub suppressed_by_budget: u64,
    /// Backups not sent because the load gate reported a utilization above
    /// the policy's maximum.
    pub suppressed_by_load: u64,
    /// Backups not sent because no eligible backend but the first
    /// attempt's had the model resident: the balancer refused them
    /// ([`NoAlternative`](crate::error::NoAlternative)) and their budget
    /// was given back.
    pub suppressed_by_no_alternative: u64,
    /// Backups sent at once because the first attempt failed fast (a
    /// failure before the delay; counted in `hedges` too).
    pub hedges_after_failure: u64,
    /// Requests whose first attempt ended (an answer, or an error no
    /// backup would help) before the backup's delay, or that the caller
    /// dropped before it: no backup needed.
    pub ended_before_delay: u64,
    /// Requests not hedged because their model had fewer than
    /// [`min_samples`](super::HedgeConfigBuilder::min_samples) latencies
    /// in its window: no delay to wait yet.
    pub warming_up: u64,
    /// Updates (`x-request-kind: update`): never hedged, a write is not
    /// idempotent.
    pub updates: u64,
    /// Requests marked [`SendOnce`](crate::route::SendOnce): never
    /// hedged, they are not safe to send twice.
    pub send_once: u64,
    /// Requests the hedge cannot copy
    /// ([`CloneRequest::clone_request`](super::CloneRequest::clone_request)
    /// gave `None`).
    pub uncopyable: u64,
    /// Requests through a layer with
    /// [`max_attempts`](super::HedgeConfigBuilder::max_attempts) 1.
    pub disabled: u64,
    /// Backups due whose service failed its readiness: not sent.
    pub backup_unready: u64,
}

impl HedgeStats {
    /// Requests not hedged, whatever the reason: every count above but
    /// `requests`, `hedges`, `hedges_won` and `hedges_after_failure`.
    pub fn not_hedged(&self) -> u64 {
        self.suppressed_by_budget
            + self.suppressed_by_load
            + self.suppressed_by_no_alternative
            + self.ended_before_delay
            + self.warming_up
            + self.updates
            + self.send_once
            + self.uncopyable
            + self.disabled
            + self.backup_unready
    }
}

/// A cheap, cloneable handle on a [`HedgeLayer`](super::HedgeLayer)'s
/// counters, delays and budget.
#[derive(Clone, Debug)]
pub struct HedgeHandle {
    pub(crate) shared: Arc<Shared>,
}

impl HedgeHandle {
    /// The counters so far.
    pub fn stats(&self) -> HedgeStats {
        let c = &self.shared.counters;
        let read = |a: &AtomicU64| a.load(Ordering::Relaxed);
        HedgeStats {
            requests: read(&c.requests),
            hedges: read(&c.hedges),
            hedges_won: read(&c.won),
            suppressed_by_budget: read(&c.suppressed_budget),
            suppressed_by_load: read(&c.suppressed_load),
            suppressed_by_no_alternative: read(&c.suppressed_no_alternative),
            hedges_after_failure: read(&c.after_failure),
            ended_before_delay: read(&c.in_time),
            warming_up: read(&c.warming_up),
            updates: read(&c.updates),
            send_once: read(&c.send_once),
            uncopyable: read(&c.uncopyable),
            disabled: read(&c.disabled),
            backup_unready: read(&c.unready),
        }
    }

    /// The delay a request for `model` would wait now before its backup,
    /// or `None` while the model has too few samples to hedge. Reading
    /// gives no window to a model not seen yet.
    pub fn delay(&self, model: &ModelId) -> Option<Duration> {
        let delays = &self.shared.delays;
        let now = Instant::now();
        match delays.find(model.hash64(), now) {
            Some(place) => delays.delay(place, now),
            None => delays.unseen(),
        }
    }

    /// Latency windows held by a model (an idle one counts until it is
    /// handed on), at most the policy's
    /// [`max_models`](super::HedgeConfigBuilder::max_models); every other model
    /// shares one window. The memory is allocated with the layer and
    /// never grows.
    ///
    /// A hook of the crate's own tests (feature `testing`): not part of
    /// the public API.
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub fn tracked_models(&self) -> usize {
        self.shared.delays.tracked()
    }

    /// The budget hedges (and a [`RetryPolicy`](super::RetryPolicy) built
    /// from the layer) draw from.
    pub fn budget(&self) -> &Budget {
        &self.shared.budget
    }
}
