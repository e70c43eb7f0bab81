//! What is being routed: the request's [`Ask`], built once from its route
//! ([`Ask::of`]) — its model, urgency, prefix, owners, and the backend a
//! hedge's backup or a retry keeps off ([`Exclusion`]).

use crate::backend::Exclude;
use crate::balance::choose::cached::Cached;
use crate::balance::choose::sampler::Draw;
use crate::balance::state::assign::Assigned;
use crate::balance::state::assigned::OwnersWalk;
use crate::balance::state::demand::Tally;
use crate::balance::state::shared::Shared;
use crate::balance::state::table::Table;
use crate::route::{PrefixKey, RequestKind, RouteView, Urgency};

/// A backend the request is kept off: the one its first attempt went to.
/// Inference only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exclusion {
    /// None: any backend may take it.
    None,
    /// A hedge's backup (a non-strict
    /// [`Exclude`](crate::backend::Exclude)): it goes where
    /// [`pick_backup`](super::backup::pick_backup) says, or is refused
    /// ([`Miss::NoAlternative`](super::ctx::Miss::NoAlternative)).
    Backup(usize),
    /// A retry (a strict [`Exclude`](crate::backend::Exclude)): anywhere
    /// but there while any other backend is eligible.
    Retry(usize),
}

/// What is being routed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ask {
    pub(crate) kind: RequestKind,
    pub(crate) urgency: Urgency,
    /// The model ID's carried xxh3 hash: residency and breakers are
    /// keyed by it.
    pub(crate) key: u64,
    /// The request's prefix key, if it has one: owners that served its
    /// session, else its group, come first.
    pub(crate) prefix: Option<PrefixKey>,
    /// How many owners the model has now (inference only).
    pub(crate) owners: usize,
    /// Whether the request is in the sample that renews its model's
    /// recency where it is resident already (see [`Residency::touch_with`]).
    ///
    /// [`Residency::touch_with`]: crate::balance::state::residency::Residency::touch_with
    pub(crate) sampled: bool,
    /// Whether the model has no recent demand (its demand bucket is
    /// empty): nothing to keep warm for it.
    pub(crate) unseen: bool,
    /// The backend not to pick, for a hedge's backup or a retry.
    pub(crate) exclude: Exclusion,
    /// The owners assigned to the model ([`Table::assigned`]; none for a
    /// prefix key's group or an update): walked before the ring.
    pub(crate) assigned: Assigned,
    /// The backends holding the most of the prompt's leading blocks
    /// (inference with [`PromptBlocks`](crate::kv::PromptBlocks) only).
    pub(crate) cached: Cached,
}

impl Ask {
    /// The ask of `route` over `table`, drawn as `draw` says. An inference
    /// request counts in its model's demand here — unless `again` (a
    /// waiting request's retried pick, counted by its first) or it carries
    /// an exclusion.
    pub(crate) fn of<E>(
        shared: &Shared<E>,
        table: &Table,
        route: &RouteView<'_>,
        draw: Draw,
        again: bool,
    ) -> Self {
        let update = route.kind == RequestKind::Update;
        // The backends holding the prompt's blocks (with prompt blocks).
        let cached = match update {
            true => Cached::default(),
            false => Cached::of(table, route),
        };
        // A request with prompt blocks but no prefix key is keyed by its
        // first block no backend holds (see `cached.rs`).
        let prefix = match (route.prefix, cached.total) {
            (None, 1..) => Some(PrefixKey::with_seed(
                route.hash,
                &cached.divergent.to_le_bytes(),
            )),
            (prefix, _) => prefix,
        };
        // The ring and demand are keyed by the prefix group, if any.
        let affinity = prefix.map_or(route.hash, |p| p.group());
        // A backend not to pick, from the request's extensions (read once).
        let exclude = Exclude::of(route);
        // Read before this request counts in it.
        let unseen = !update && shared.demand.unseen(affinity);
        // The owners planned for the model, if it has them (not for an
        // update, nor for a prefix key's group).
        let assigned = match route.kind {
            RequestKind::Update => Assigned::default(),
            _ if affinity != route.hash => Assigned::default(),
            _ => table.assigned.get(route.hash),
        };
        let owners = match route.kind {
            RequestKind::Update => 0,
            _ => {
                // A counted request counts in its model's share, weighted
                // by the work its requests take — once: a hedge's backup
                // or a retry (an exclusion) is a request its first
                // attempt counted already, and counted again it would
                // give a hedged model owners (cold copies) its traffic
                // does not need.
                let again = again || exclude.is_some();
                let tally = match draw.counted && !again {
                    true => Tally::Count {
                        work: table.fleet.work.weight(route.hash),
                    },
                    false => Tally::Peek,
                };
                // Counted whether or not the plan sized them (on the
                // averages): demand is what the next plan reads.
                let k = shared.owners_of(route.hash, affinity, tally, table.in_ring);
                assigned.count_or(k)
            }
        };
        Self {
            kind: route.kind,
            urgency: route.urgency,
            key: route.hash,
            prefix: prefix.filter(|_| !update),
            owners,
            sampled: draw.timed,
            unseen,
            exclude: Exclusion::of(table, exclude),
            assigned,
            cached,
        }
    }

    /// What the ring walk is keyed by: the prefix key's group, else
    /// [`Ask::key`].
    #[inline]
    pub(crate) fn affinity(&self) -> u64 {
        self.prefix.map_or(self.key, |p| p.group())
    }

    /// The request's walk over `table`: its assigned owners, then the ring
    /// from [`Ask::affinity`] without them.
    #[inline]
    pub(crate) fn walk<'t>(&self, table: &'t Table) -> OwnersWalk<'t> {
        table.walk(self.affinity(), self.assigned)
    }
}

impl Exclusion {
    /// The request's exclusion, as an index into `table`; none if its
    /// backend is not in the table.
    fn of(table: &Table, exclude: Option<&Exclude>) -> Self {
        let Some(x) = exclude else {
            return Self::None;
        };
        // A hedge's backup: rare, so a scan of the table.
        match table.backends.iter().position(|b| &b.id == x.backend()) {
            None => Self::None,
            Some(i) if x.is_strict() => Self::Retry(i),
            Some(i) => Self::Backup(i),
        }
    }
}
