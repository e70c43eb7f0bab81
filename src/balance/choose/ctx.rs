//! What one pick works on and gives: the context ([`Ctx`]) over one table
//! through which every choice reads eligibility, cost and residency (no
//! IO, no allocation, no lock but the breaker's on its non-closed paths —
//! and, in the opt-in per-model breaker scope, a short one to find the
//! pair's breaker), and the result ([`Pick`], or why none: [`Miss`]).

use crate::balance::state::backend::{Admission, BackendState};
use crate::balance::state::clock::Now;
use crate::balance::state::cost::at_floor;
use crate::balance::state::prefix::PrefixHit;
use crate::balance::state::residency::{Presence, Warmth};
use crate::balance::state::table::Table;
use crate::balance::state::traffic::Branch;
use crate::route::Urgency;

/// The most owners a model can have.
pub(crate) const MAX_OWNERS: usize =
    crate::balance::config::builder::BalanceConfigBuilder::MAX_OWNERS;
/// How far past its owners a spilled request looks for a backend where its
/// model is resident, in distinct backends.
pub(crate) const SPILL_SCAN: usize = 16;
/// How long (ms) after a model was first sent to a backend it may still be
/// loading there (adapters load in 0.1–0.4 s, LLMs in seconds).
pub(crate) const LOADING_GRACE_MS: u64 = 2_000;
/// Loads a backend is given at once: a model load holds memory bandwidth
/// and, on many servers, a serving slot, so piling loads onto one backend
/// stalls the warm traffic it serves.
pub(crate) const LOADS_AT_ONCE: usize = 1;

/// A chosen backend with its breaker permit.
#[derive(Debug)]
pub(crate) struct Pick {
    pub(crate) index: usize,
    pub(crate) admission: Admission,
    pub(crate) branch: Branch,
    /// Cold for an inference request whose model was not yet served
    /// there: its success confirms the model in memory.
    pub(crate) warmth: Warmth,
    /// With `prefer_warm`, the owner passed over for a warm backend: the
    /// model should be loaded there.
    pub(crate) prefetch: Option<usize>,
    /// What the chosen backend's prefix record said of the request's key.
    pub(crate) hit: PrefixHit,
}

/// Why a pick chose no backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Miss {
    /// No backend admits the request.
    NoBackend,
    /// Eligible backends there are, but every one the request could go to
    /// is at its admission limit.
    Saturated,
    /// A hedge's backup ([`Exclusion::Backup`](super::ask::Exclusion::Backup)) with nowhere it could
    /// help (see [`pick_backup`](super::backup::pick_backup)).
    NoAlternative,
}

/// The bounded-load cap: `ceil(c × (total in-flight + 1) / n)`, `n` the
/// backends the ring in force stands for ([`Table::in_ring`]): a backend
/// whose join is still staged holds part of its share of the ring, and
/// takes that part of the traffic — counted as a whole backend, it would
/// lower every other backend's cap while it warms up.
pub(crate) fn load_cap(table: &Table, c: f64) -> usize {
    let n = table.in_ring.max(1.0);
    (c * (table.fleet_load() + 1) as f64 / n).ceil() as usize
}

/// Envoy's panic threshold: fewer than `threshold × n` backends eligible
/// and healthy — a backend the ejection cap alone keeps in counts as
/// unhealthy, so that with every backend unhealthy the balancer panics
/// rather than pile the traffic onto those the cap kept.
/// Free while every breaker is closed and no backend ejected nor held,
/// and while too few are out to reach the threshold: a backend does not
/// count only when its breaker is not closed, health ejected or held it
/// or it was removed, so at least
/// `n − not_closed − ejected − held − removed` backends count
/// (the counts may overlap, which only lowers the bound). Otherwise a scan
/// of the table, which stops once the answer is known — without the
/// bound, a fleet of 1,000 with one breaker open would check every
/// backend on every pick.
pub(crate) fn in_panic(table: &Table, threshold: f64, now: &Now) -> bool {
    use std::sync::atomic::Ordering::Relaxed;
    let fleet = &table.fleet;
    let out = fleet.gauges.out();
    if threshold <= 0.0 || out == 0 {
        return false;
    }
    let n = table.backends.len();
    let needed = threshold * n as f64;
    let surely_eligible = n.saturating_sub(out + fleet.gauges.removed.load(Relaxed));
    if surely_eligible as f64 >= needed {
        return false;
    }
    let now = now.get();
    let mut eligible = 0usize;
    for (seen, b) in table.backends.iter().enumerate() {
        if b.counts_healthy(now) {
            eligible += 1;
            if eligible as f64 >= needed {
                return false;
            }
        } else if ((eligible + n - seen - 1) as f64) < needed {
            // Too few left to reach the threshold.
            return true;
        }
    }
    (eligible as f64) < needed
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Normal,
    /// Every backend not removed nor drained by hand is eligible, breakers
    /// bypassed.
    Panic,
}

pub(crate) struct Ctx<'a> {
    pub(crate) table: &'a Table,
    pub(crate) mode: Mode,
    pub(crate) now: &'a Now,
    /// The model's hash: keys its breakers in `BackendModel` scope.
    pub(crate) key: u64,
    /// A backend treated as not eligible (a retry's
    /// [`Exclusion::Retry`](super::ask::Exclusion::Retry), while another
    /// is eligible).
    pub(crate) exclude: Option<usize>,
    /// The request's urgency: a `Critical` one has headroom above the
    /// admission limit.
    pub(crate) urgency: Urgency,
}

impl Ctx<'_> {
    pub(crate) fn state(&self, i: usize) -> &BackendState {
        &self.table.backends[i]
    }

    pub(crate) fn eligible(&self, i: usize) -> bool {
        if self.exclude == Some(i) {
            return false;
        }
        match self.mode {
            Mode::Normal => self.state(i).eligible_for(self.key, self.now),
            Mode::Panic => !self.state(i).is_removed() && !self.state(i).is_drained(),
        }
    }

    /// Whether backend `i` has room for the request under its admission
    /// limit (always, without admission).
    #[inline]
    pub(crate) fn room(&self, i: usize) -> bool {
        self.state(i).has_room(self.urgency)
    }

    /// Takes a permit on backend `i`: the breaker in scope's (the
    /// backend's, or the (backend, model) pair's; it may refuse a half-open
    /// breaker whose probes are out), or a bypass in panic mode. A
    /// backend on trial after a readmission ([`Ctx::first`]) has had it.
    #[inline(always)]
    pub(crate) fn admit(&self, i: usize, branch: Branch) -> Option<Pick> {
        let state = self.state(i);
        let (admission, branch) = match self.mode {
            Mode::Normal => (state.try_acquire(self.key, self.now)?, branch),
            Mode::Panic => (Admission::Bypass, Branch::Panic),
        };
        // Its trial after a readmission, if it was on one: this request.
        state.health.end_trial();
        Some(Pick {
            index: i,
            admission,
            branch,
            warmth: Warmth::Warm,
            prefetch: None,
            hit: PrefixHit::None,
        })
    }

    /// Whether the model is served, or may still be loading, on `i`.
    pub(crate) fn resident(&self, i: usize, key: u64) -> bool {
        self.presence(i, key) != Presence::Absent
    }

    pub(crate) fn presence(&self, i: usize, key: u64) -> Presence {
        self.state(i).residency.presence(key, || self.now_ms())
    }

    /// The pick's time on the fleet's millisecond clock (the clock read
    /// on first need).
    #[inline]
    pub(crate) fn now_ms(&self) -> u64 {
        self.table.millis(self.now.get())
    }

    /// The cheapest of `among` (all eligible): a backend to try first
    /// ([`Ctx::first`]) before the others, one above the health floor
    /// before one at it, then the lowest cost (the first of equal ones).
    pub(crate) fn cheapest(&self, among: impl Iterator<Item = usize>) -> Option<usize> {
        among
            .map(|i| {
                let state = self.state(i);
                let floor = self.mode == Mode::Normal && at_floor(state.health.score.get());
                (i, self.first(i), floor, state.cost())
            })
            .min_by(|a, b| b.1.cmp(&a.1).then(a.2.cmp(&b.2)).then(a.3.total_cmp(&b.3)))
            .map(|(i, _, _, _)| i)
    }

    /// Whether eligible backend `i` takes a request before its rival
    /// whatever their costs: its breaker waits for its half-open probes
    /// ([`Ctx::probing`]), or health readmitted it and it was not picked
    /// since (its score still carries the failures that took it out, and
    /// only an answer refreshes it; [`Ctx::admit`] ends the trial). Never
    /// in panic mode.
    pub(crate) fn first(&self, i: usize) -> bool {
        self.probing(i) || (self.mode == Mode::Normal && self.state(i).health.on_trial())
    }

    /// Whether eligible backend `i`'s breaker is not closed (it admits
    /// calls, so its open duration is up or a half-open permit is left):
    /// the request is one of its few half-open probes. Its cost is no
    /// guide then — its latency estimate is full of the failure penalties
    /// that tripped it and nothing refreshes it while it is out — and
    /// left to P2C, the probes would wait for the rival to be the costlier
    /// (or over the cap), keeping a healed backend out past its open
    /// duration. The permits bound what a still failing backend gets.
    /// Backend scope only (in `BackendModel` scope a pair's breaker
    /// decides), never in panic mode (breakers bypassed).
    pub(crate) fn probing(&self, i: usize) -> bool {
        self.mode == Mode::Normal
            && self.table.fleet.scoped.is_none()
            && !self.state(i).breaker.admits_freely()
    }
}
