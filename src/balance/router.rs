//! One routing decision, shared by the `Service` path and the pick API.

use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::demand::Bounds;
use super::guard::Guard;
use super::pick::{pick, Ask, Rules};
use super::Shared;
use crate::backend::BackendId;
use crate::error::NoHealthyBackend;
use crate::route::{RequestKind, RouteView};

/// A backend chosen by [`ModelBalancer::pick`](super::ModelBalancer::pick):
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

impl<E: Clone> Shared<E> {
    /// Picks a backend for `route` at `now`, counting the branch taken.
    pub(crate) fn route(
        &self,
        route: &RouteView<'_>,
        now: Instant,
        random: &mut impl FnMut() -> u64,
    ) -> Result<Picked<E>, NoHealthyBackend> {
        let snapshot = self.snapshot.load();
        let table = &snapshot.table;
        let config = &self.config;
        let owners = match route.kind {
            RequestKind::Update => 0,
            _ => match self.fixed_owners(route.hash) {
                Some(k) => k,
                None => self.demand.owners(
                    route.hash,
                    Bounds {
                        n: table.backends.len(),
                        c: config.load_factor,
                        min: config.min_owners,
                        max: config.owners,
                    },
                ),
            },
        };
        let ask = Ask {
            kind: route.kind,
            urgency: route.urgency,
            key: route.hash,
            owners,
        };
        let rules = Rules {
            load_factor: config.load_factor,
            panic_threshold: config.panic_threshold,
        };
        let Some(picked) = pick(table, &ask, &rules, now, random) else {
            self.stats.no_backend.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(model = route.model, "no healthy backend");
            return Err(NoHealthyBackend::new(route.model_id()));
        };
        self.stats.count(picked.branch);
        let state = &table.backends[picked.index];
        tracing::trace!(backend = %state.id, model = route.model, branch = ?picked.branch, "picked");
        Ok(Picked {
            endpoint: snapshot.endpoints[picked.index].clone(),
            guard: Guard::new(state.clone(), picked.admission, now),
        })
    }

    fn fixed_owners(&self, key: u64) -> Option<usize> {
        if self.fixed_owners.is_empty() {
            return None;
        }
        let i = self.fixed_owners.binary_search_by_key(&key, |e| e.0).ok()?;
        Some(self.fixed_owners[i].1)
    }
}
