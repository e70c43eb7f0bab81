//! One routing decision, shared by the `Service` path and the pick API.

use tokio::time::Instant;

use crate::backend::BackendId;
use crate::balance::choose::ask::Ask;
use crate::balance::choose::pick::pick;
use crate::balance::choose::rules::Rules;
use crate::balance::choose::sampler::{Draw, Sampler};
use crate::balance::choose::scratch::Scratch;
use crate::balance::choose::start::start;
use crate::balance::completion::guard::Guard;
use crate::balance::refused::Refused;
use crate::balance::state::clock::Now;
use crate::balance::state::shared::Shared;
use crate::route::RouteView;

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
        let table = &snapshot.table;
        let draw = self.sampler.draw();
        let ask = Ask::of(shared, table, route, draw, self.retries);
        // Under admission an arrival does not take room a request of its
        // urgency or higher waits for, for the same model: it joins the
        // queue behind it, or is shed (a retry of a waiting request is
        // that request).
        if !self.retries && table.queued_ahead(route.urgency, route.hash) {
            return Err(Refused::saturated(&table.fleet, route));
        }
        let placement = table.placement();
        let rules = Rules::of(&shared.config, placement);
        let picked = pick(table, &ask, &rules, now, random, &mut self.scratch)
            .map_err(|miss| Refused::of(miss, &shared.stats, &table.fleet, route, &ask))?;
        let index = picked.index;
        let started = self.started(draw, timed, now);
        let receipt_at = shared.config.receipts.then_some(now);
        let guard = start(table, placement, picked, &ask, route, started, receipt_at);
        Ok(Picked {
            endpoint: snapshot.endpoints[index].clone(),
            guard,
        })
    }

    /// When the request started, if its guard times it (`timed`, or the
    /// clone's sampler drew it); a sampled start goes to the sampler.
    fn started(&mut self, draw: Draw, timed: Timed, now: &Now) -> Option<Instant> {
        let started = (timed == Timed::Always || draw.timed).then(|| now.get());
        if draw.timed {
            // The same instant: `now` reads the clock once per pick.
            self.sampler.started(now.get());
        }
        started
    }
}
