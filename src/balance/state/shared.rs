//! What every clone and handle of one balancer shares, and the same
//! without the endpoint type ([`View`]) for the handle and the background
//! tasks.

use std::iter::Take;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::balance::config::admission::urgency_index;
use crate::balance::config::fields::BalanceConfig;
use crate::balance::state::assign::{self, Demanded};
use crate::balance::state::assigned::OwnersWalk;
use crate::balance::state::demand::{Bounds, Demand, Tally};
use crate::balance::state::placement::Owners;
use crate::balance::state::table::{Snapshot, Table};
use crate::route::Urgency;

/// State shared by a balancer's clones and its discovery task.
#[derive(Debug)]
pub(crate) struct Shared<E> {
    pub(crate) snapshot: ArcSwap<Snapshot<E>>,
    pub(crate) config: BalanceConfig,
    pub(crate) stats: Counters,
    pub(crate) demand: Demand,
    /// `config.model_owners` by model hash, sorted.
    pub(crate) fixed_owners: Box<[(u64, usize)]>,
    pub(crate) clones: AtomicU64,
    /// Dropped with the last clone and handle: tells the background tasks
    /// (discovery, health, probes) to stop even while they wait.
    pub(crate) gone: tokio::sync::watch::Sender<()>,
}

impl<E> Shared<E> {
    pub(crate) fn new(
        snapshot: Snapshot<E>,
        config: BalanceConfig,
        gone: tokio::sync::watch::Sender<()>,
    ) -> Self {
        let mut fixed_owners: Vec<(u64, usize)> = config
            .model_owners
            .iter()
            .map(|(model, k)| (model.hash64(), *k))
            .collect();
        fixed_owners.sort_unstable();
        Self {
            snapshot: ArcSwap::from_pointee(snapshot),
            config,
            stats: Counters::default(),
            demand: Demand::new(),
            fixed_owners: fixed_owners.into_boxed_slice(),
            clones: AtomicU64::new(0),
            gone,
        }
    }

    pub(crate) fn publish(&self, snapshot: Snapshot<E>) {
        self.snapshot.store(Arc::new(snapshot));
    }
}

impl<E: Send + Sync> View for Shared<E> {
    fn table(&self) -> Arc<Table> {
        self.snapshot.load().table.clone()
    }

    fn counters(&self) -> &Counters {
        &self.stats
    }

    fn gone(&self) -> tokio::sync::watch::Receiver<()> {
        self.gone.subscribe()
    }

    fn owners<'t>(&self, table: &'t Table, key: u64) -> Take<OwnersWalk<'t>> {
        let assigned = table.assigned.get(key);
        let demand = Shared::owners_of(self, key, key, Tally::Peek, table.in_ring);
        table.walk(key, assigned).take(assigned.count_or(demand))
    }

    fn reassign(&self) {
        let table = View::table(self);
        let bounds = Bounds::of(&self.config, table.in_ring);
        let models: Vec<Demanded> = self
            .demand
            .models()
            .into_iter()
            .map(|(key, share)| {
                let work = share * table.fleet.work.weight(key);
                let previous = table.assigned.get(key);
                // Sized here, on the averages, four times a second (the
                // picks of an assigned model take this many owners): from
                // its assigned owners, else from what demand gave it.
                let owners = match (self.fixed_owners(key), previous.len) {
                    (Some(k), _) => k,
                    (None, 0) => Shared::owners_of(self, key, key, Tally::Peek, table.in_ring),
                    (None, len) => bounds.next(work, bounds.clamp(usize::from(len))),
                };
                Demanded {
                    key,
                    owners,
                    previous,
                }
            })
            .collect();
        let slots: Vec<usize> = table
            .backends
            .iter()
            .map(|b| b.residency.capacity())
            .collect();
        let resident = |i: usize, key| table.backends[i].residency.contains(key);
        let plan = assign::plan(&table.ring, &slots, &models, resident);
        tracing::trace!(
            models = models.len(),
            assigned = plan.len(),
            "owners planned"
        );
        table.assigned.store(&plan);
    }
}

/// The requests that reached no backend; those picked are counted by
/// branch in the fleet's traffic.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) no_backend: AtomicU64,
    pub(crate) invalid_route: AtomicU64,
    /// Shed under admission, by urgency index (Normal, High, Critical).
    pub(crate) shed: [AtomicU64; 3],
}

impl Counters {
    /// Counts a request of `urgency` shed.
    pub(crate) fn shed(&self, urgency: Urgency) {
        self.shed[urgency_index(urgency)].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// What the handle reads from the balancer's shared state, whatever its
/// endpoint type.
pub(crate) trait View: Owners {
    fn table(&self) -> Arc<Table>;
    fn counters(&self) -> &Counters;
    /// Closed once every clone and handle of the balancer is dropped.
    fn gone(&self) -> tokio::sync::watch::Receiver<()>;
    /// The owners of the model with hash `key` in `table` (ring member
    /// indices), as a pick walks and counts them: its planned owners, as
    /// many as the plan gave it, else the first of its ring walk, as many
    /// as demand (or the configuration) gives it.
    fn owners<'t>(&self, table: &'t Table, key: u64) -> Take<OwnersWalk<'t>>;
    /// Assigns the models in demand their owners over the table in force
    /// ([`assign::plan`](crate::balance::state::assign::plan)), for the picks to read.
    fn reassign(&self);
}

impl<E: Send + Sync> Owners for Shared<E> {
    /// Whether the backend with `uid` is one of the owners of the model
    /// with hash `key` now.
    fn owns(&self, uid: u64, key: u64) -> bool {
        let table = View::table(self);
        View::owners(self, &table, key).any(|i| table.backends[i].uid == uid)
    }
}

impl<E> Shared<E> {
    /// How many owners the model with hash `key` — or its prefix group
    /// `group` (`key` itself without a prefix key) — has over `n` backends
    /// (the ring's, [`Table::in_ring`](crate::balance::state::table::Table::in_ring)),
    /// counting this request in the group's demand under [`Tally::Count`].
    /// A model's fixed owner count is each of its groups'.
    pub(crate) fn owners_of(&self, key: u64, group: u64, tally: Tally, n: f64) -> usize {
        if key == group && matches!(tally, Tally::Count { .. }) {
            self.demand.name(key);
        }
        match self.fixed_owners(key) {
            Some(k) => k,
            None => self
                .demand
                .owners(group, tally, Bounds::of(&self.config, n)),
        }
    }

    fn fixed_owners(&self, key: u64) -> Option<usize> {
        if self.fixed_owners.is_empty() {
            return None;
        }
        let i = self.fixed_owners.binary_search_by_key(&key, |e| e.0).ok()?;
        Some(self.fixed_owners[i].1)
    }
}
