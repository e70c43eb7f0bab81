//! One routing decision, shared by the `Service` path and the pick API.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::backend::{BackendId, Exclude};
use crate::balance::choose::ask::Ask;
use crate::balance::choose::ctx::{Miss, Rules};
use crate::balance::choose::pick::pick;
use crate::balance::choose::receipt::receipt;
use crate::balance::choose::sampler::Sampler;
use crate::balance::choose::scratch::Scratch;
use crate::balance::completion::guard::Guard;
use crate::balance::config::fields::BalanceConfig;
use crate::balance::error::{NoAlternative, NoHealthyBackend, Overloaded};
use crate::balance::state::clock::Now;
use crate::balance::state::residency::Warmth;
use crate::balance::state::shared::Shared;
use crate::balance::state::traffic::Branch;
use crate::error::BoxError;
use crate::placement::WhenCold;
use crate::route::{RequestKind, RouteView};

/// A backend chosen by [`ModelBalancer::pick`](crate::balance::ModelBalancer::pick):
/// its endpoint and the guard that takes the request's outcome back.
#[derive(Debug)]
#[non_exhaustive]
pub struct Picked<E> {
    /// A clone of the chosen backend's endpoint.
    pub endpoint: E,
    /// The request's guard: finish it with the outcome, or drop it to
    /// cancel.
    pub guard: Guard,
}

impl<E> Picked<E> {
    /// The chosen backend.
    pub fn backend(&self) -> &BackendId {
        self.guard.backend()
    }
}

/// Why [`Local::route`] routed nothing.
#[derive(Debug)]
pub(crate) enum Refused {
    NoBackend(NoHealthyBackend),
    /// Only a request carrying a non-strict
    /// [`Exclude`](crate::backend::Exclude) (a hedge's backup) is refused so.
    NoAlternative(NoAlternative),
    /// Under admission: every backend the request could go to is at its
    /// limit. The caller queues it, or sheds it with this error.
    Saturated(Overloaded),
}

impl From<Refused> for BoxError {
    fn from(refused: Refused) -> Self {
        match refused {
            Refused::NoBackend(e) => e.into(),
            Refused::NoAlternative(e) => e.into(),
            Refused::Saturated(e) => e.into(),
        }
    }
}

/// One balancer clone's own state: the sample of its requests that feeds
/// the estimates, and room for its picks.
///
/// It holds no snapshot between requests: each pick loads the one in force
/// (an `ArcSwap` load, lock-free, with no shared count touched on its fast
/// path). A snapshot cached per clone would keep every backend removed
/// since — its endpoint, and the endpoint's connection pool — alive for as
/// long as the clone routed nothing; loaded per pick, a removed backend's
/// endpoint is dropped when discovery publishes the removal, or when the
/// picks under way then end.
#[derive(Debug)]
pub(crate) struct Local {
    sampler: Sampler,
    /// Room for a pick's owner lists (on the heap only once a model with
    /// many owners is routed).
    scratch: Scratch,
    /// The picks of requests that wait for room, each counted once in its
    /// model's demand already (by its first pick): none counts again.
    retries: bool,
}

impl Local {
    pub(crate) fn new() -> Self {
        Self {
            sampler: Sampler::new(1),
            scratch: Scratch::default(),
            retries: false,
        }
    }

    /// The state of one waiting request's retried picks, sampling with a
    /// stream seeded from `seed`; none counts in demand.
    pub(crate) fn for_retries(seed: u64) -> Self {
        Self {
            retries: true,
            ..Self::new().fork(seed)
        }
    }

    /// A copy for a new balancer clone, sampling with its own stream
    /// seeded from `seed`.
    pub(crate) fn fork(&self, seed: u64) -> Self {
        Self {
            sampler: Sampler::new(seed),
            scratch: Scratch::default(),
            retries: false,
        }
    }

    /// The probability of timing this clone's requests, as a power of 1/2
    /// (tests).
    #[cfg(test)]
    pub(crate) fn sample_shift(&self) -> u32 {
        self.sampler.shift()
    }
}

/// Saturation: the error a request shed at once fails with.
#[cold]
fn saturated(config: &BalanceConfig, route: &RouteView<'_>) -> Refused {
    let retry_after = config.admission.as_ref().map(|a| a.retry_after);
    Refused::Saturated(Overloaded::new(
        route.model_id(),
        route.urgency,
        Duration::ZERO,
        retry_after.unwrap_or_default(),
    ))
}

/// Which requests' guards record their latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timed {
    /// Every one (the pick API, which times every request).
    Always,
    /// Those the clone's sampler draws (the `Service` path).
    Sampled,
}

impl Local {
    /// Picks a backend for `route` at `now`, counting the branch taken;
    /// `timed` says whether the guard records the latency on every
    /// finish or only on the sampled requests.
    #[inline]
    pub(crate) fn route<E: Clone>(
        &mut self,
        shared: &Shared<E>,
        route: &RouteView<'_>,
        now: &Now,
        timed: Timed,
        random: &mut impl FnMut() -> u64,
    ) -> Result<Picked<E>, Refused> {
        // The decision's span: the events below carry its fields. Off (no
        // subscriber at TRACE), it costs a relaxed load and allocates
        // nothing.
        let _span = tracing::trace_span!(
            "pick",
            model = route.model,
            kind = ?route.kind,
            urgency = ?route.urgency
        )
        .entered();
        let snapshot = shared.snapshot.load();
        let draw = self.sampler.draw();
        let table = &snapshot.table;
        let config = &shared.config;
        let ask = Ask::of(shared, table, route, draw, self.retries);
        // Under admission an arrival does not take room a request of its
        // urgency or higher waits for, for the same model: it joins the
        // queue behind it, or is shed (a retry of a waiting request is
        // that request).
        if !self.retries && table.fleet.queue.ahead(route.urgency, route.hash) {
            return Err(saturated(config, route));
        }
        let placement = table.fleet.placement.get();
        let rules = Rules {
            load_factor: config.load_factor,
            panic_threshold: config.panic_threshold,
            placement: placement.is_some(),
            prefer_warm: placement.is_some_and(|p| p.policy().when_cold() == WhenCold::PreferWarm),
        };
        let mut picked = match pick(table, &ask, &rules, now, random, &mut self.scratch) {
            Ok(picked) => picked,
            Err(Miss::NoBackend) => {
                shared.stats.no_backend.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(model = route.model, ask.owners, ask.unseen, "no healthy backend");
                return Err(Refused::NoBackend(NoHealthyBackend::new(route.model_id())));
            }
            Err(Miss::Saturated) => {
                tracing::debug!(model = route.model, ask.owners, "saturated");
                return Err(saturated(config, route));
            }
            Err(Miss::NoAlternative) => {
                // Only reached with an exclusion (the ask's comes from it).
                let excluded = Exclude::of(route).map(|x| x.backend().clone());
                tracing::debug!(
                    model = route.model,
                    ?excluded,
                    "backup refused: no alternative"
                );
                return Err(match excluded {
                    Some(x) => Refused::NoAlternative(NoAlternative::new(route.model_id(), x)),
                    None => Refused::NoBackend(NoHealthyBackend::new(route.model_id())),
                });
            }
        };
        if placement.is_some()
            && picked.warmth == Warmth::Cold
            && picked.branch == Branch::ResidentOwner
        {
            // It waits for its model's load there: a cold request.
            picked.branch = Branch::ColdOwner;
        }
        // Counts the request in the fleet's in-flight load too: the
        // guard's drop counts it out.
        table.fleet.gauges.traffic.start(picked.branch);
        if let (Some(owner), Some(placement)) = (picked.prefetch, placement) {
            placement.prefetch(&table.backends[owner], route.model_id());
        }
        let state = &table.backends[picked.index];
        tracing::trace!(
            backend = %state.id,
            branch = ?picked.branch,
            ask.owners,
            ask.unseen,
            "picked"
        );
        let started = (timed == Timed::Always || draw.timed).then(|| now.get());
        if draw.timed {
            // The same instant: `now` reads the clock once per pick.
            self.sampler.started(now.get());
        }
        let receipt = config.receipts.then(|| receipt(table, &ask, &picked, now));
        let guard = Guard::new(
            state.clone(),
            picked.admission,
            started,
            (route.kind != RequestKind::Update).then_some(route.hash),
            picked.warmth,
        );
        Ok(Picked {
            endpoint: snapshot.endpoints[picked.index].clone(),
            guard: match receipt {
                Some(receipt) => guard.with_receipt(receipt),
                None => guard,
            },
        })
    }
}
