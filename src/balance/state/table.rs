//! The routing snapshot: ring plus per-backend state, swapped atomically.

use std::sync::Arc;

use tokio::time::Instant;

use crate::balance::state::assign::Assigned;
use crate::balance::state::assigned::{AssignedTable, OwnersWalk};
use crate::balance::state::backend::BackendState;
use crate::balance::state::fleet::Fleet;
use crate::balance::state::placement::Placement;
use crate::ring::Ring;
use crate::route::Urgency;

/// Ring and backend states; `backends[i]` is ring member `i`.
#[derive(Debug)]
pub(crate) struct Table {
    pub(crate) ring: Ring,
    pub(crate) backends: Vec<Arc<BackendState>>,
    pub(crate) fleet: Arc<Fleet>,
    /// The backends the ring in force stands for: each counts by the share
    /// of its target points it holds, up to one — a backend whose join is
    /// still staged counts for the part of the ring it has. Demand sizes
    /// models' owners over this, so that owners grow with the ring's
    /// steps rather than all at once when backends join.
    pub(crate) in_ring: f64,
    /// The owners assigned to the models in demand (ring member indices
    /// of this table), rewritten by the owner-plan task (`tasks/assign.rs`);
    /// empty at first.
    pub(crate) assigned: AssignedTable,
}

impl Table {
    pub(crate) fn empty(fleet: Arc<Fleet>) -> Self {
        Self {
            ring: Ring::build(&Default::default(), Vec::new()).expect("an empty ring is valid"),
            backends: Vec::new(),
            fleet,
            in_ring: 0.0,
            assigned: AssignedTable::default(),
        }
    }

    /// The walk from `affinity`: `assigned` first (see [`Table::assigned`]),
    /// then the ring's walk without them.
    #[inline]
    pub(crate) fn walk(&self, affinity: u64, assigned: Assigned) -> OwnersWalk<'_> {
        OwnersWalk::new(&self.ring, affinity, assigned)
    }

    /// On-demand placement, once enabled.
    #[inline]
    pub(crate) fn placement(&self) -> Option<&Arc<Placement>> {
        self.fleet.placement()
    }

    /// Whether per-backend admission is on.
    #[inline]
    pub(crate) fn under_admission(&self) -> bool {
        self.fleet.admission().is_some()
    }

    /// Whether a request waits for room, under admission, that an arrival
    /// of `urgency` for the model with hash `key` must not take.
    #[inline]
    pub(crate) fn queued_ahead(&self, urgency: Urgency, key: u64) -> bool {
        self.fleet.queue.ahead(urgency, key)
    }

    /// `now` on the fleet's millisecond clock (residency stamps).
    #[inline]
    pub(crate) fn millis(&self, now: Instant) -> u64 {
        self.fleet.millis(now)
    }

    /// Requests in flight over every backend.
    pub(crate) fn fleet_load(&self) -> usize {
        self.fleet.gauges.traffic.in_flight()
    }
}

/// What the request path loads: the table and the endpoints, index for
/// index.
#[derive(Debug)]
pub(crate) struct Snapshot<E> {
    pub(crate) table: Arc<Table>,
    pub(crate) endpoints: Vec<E>,
}
