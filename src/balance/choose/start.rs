//! A picked request starts: counted in flight, its model prefetched where
//! a warm backend was preferred to its owner, and its guard made.

use std::sync::Arc;

use tokio::time::Instant;

use crate::balance::choose::ask::Ask;
use crate::balance::choose::ctx::Pick;
use crate::balance::choose::receipt::receipt;
use crate::balance::completion::guard::Guard;
use crate::balance::state::clock::Now;
use crate::balance::state::in_flight::InFlight;
use crate::balance::state::placement::Placement;
use crate::balance::state::residency::Warmth;
use crate::balance::state::table::Table;
use crate::balance::state::traffic::Branch;
use crate::route::{RequestKind, RouteView};

/// The request `ask` picked as `picked` over `table` starts: counted in
/// the fleet's traffic by the branch it takes and in flight on the chosen
/// backend (the guard's drop counts it out) — with placement on, a
/// resident owner without the model served is a cold owner (the request
/// waits for its model's load there) — and the model prefetched on the
/// owner a warm backend was preferred to. Its guard holds the breaker's
/// permit, is timed from `started` (if timed), and carries the receipt
/// made at `receipt_at` (receipts on).
#[inline]
pub(crate) fn start(
    table: &Table,
    placement: Option<&Arc<Placement>>,
    mut picked: Pick,
    ask: &Ask,
    route: &RouteView<'_>,
    started: Option<Instant>,
    receipt_at: Option<&Now>,
) -> Guard {
    if placement.is_some()
        && picked.warmth == Warmth::Cold
        && picked.branch == Branch::ResidentOwner
    {
        // It waits for its model's load there: a cold request.
        picked.branch = Branch::ColdOwner;
    }
    let in_flight = InFlight::start(table.backends[picked.index].clone(), picked.branch);
    if let (Some(owner), Some(placement)) = (picked.prefetch, placement) {
        placement.prefetch(&table.backends[owner], route.model_id());
    }
    tracing::trace!(
        backend = %table.backends[picked.index].id,
        branch = ?picked.branch,
        owners = ask.owners,
        unseen = ask.unseen,
        "picked"
    );
    let receipt = receipt_at.map(|now| receipt(table, ask, route, &picked, now));
    Guard::new(
        in_flight,
        picked.admission,
        started,
        (ask.kind != RequestKind::Update).then_some(ask.key),
        picked.warmth,
        receipt,
    )
}
