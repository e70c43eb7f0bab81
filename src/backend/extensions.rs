//! The request extensions through which a hedging layer or a retry and
//! the balancer pass a backend: [`PickedSlot`] (where the balancer writes
//! its pick) and [`Exclude`] (a backend not to pick).

use std::sync::Arc;

use super::id::BackendId;
#[cfg(feature = "balance")]
use crate::route::Route;

/// A slot, shared between a request's sender and the balancer, where the
/// balancer writes the backend it picked for the request.
///
/// A hedging layer puts one in the first attempt's extensions; the
/// balancer writes its pick there (first write wins), and the layer builds
/// the backup's [`Exclude`] from it, so the backup goes to a different
/// backend. When the backup then answers first, the layer marks the slot
/// superseded before it drops the first attempt, and the balancer gives
/// the time that attempt ran to its backend's latency estimate — a lost
/// race, not a failure (see [`Guard`](crate::balance::Guard)). Always built, so the balancer
/// reads it without feature `hedge`. Cloning shares the slot (one
/// allocation when created).
///
/// ```
/// use tower_model_balance::backend::{BackendId, PickedSlot};
///
/// let slot = PickedSlot::new();
/// let seen_by_balancer = slot.clone();
/// assert!(slot.get().is_none());
/// seen_by_balancer.set(&BackendId::new("gpu-0").unwrap());
/// assert_eq!(slot.get().unwrap().as_str(), "gpu-0");
/// ```
#[derive(Clone, Debug, Default)]
pub struct PickedSlot(Arc<Slot>);

#[derive(Debug, Default)]
struct Slot {
    picked: std::sync::OnceLock<BackendId>,
    /// Set when a backup answered before the attempt this slot went with.
    superseded: std::sync::atomic::AtomicBool,
}

impl PickedSlot {
    /// An empty slot.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records the picked backend; a second write is ignored (the first
    /// pick is the one the request went to).
    pub fn set(&self, backend: &BackendId) {
        if self.0.picked.get().is_none() {
            let _ = self.0.picked.set(backend.clone());
        }
    }

    /// The backend written, if any yet.
    pub fn get(&self) -> Option<&BackendId> {
        self.0.picked.get()
    }

    /// Marks the attempt this slot went with as outrun by a backup: called
    /// before that attempt is dropped.
    #[cfg(feature = "hedge")]
    pub(crate) fn supersede(&self) {
        self.0
            .superseded
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether a backup outran the attempt this slot went with.
    #[cfg_attr(not(feature = "balance"), allow(dead_code))]
    pub(crate) fn is_superseded(&self) -> bool {
        self.0.superseded.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Empties the slot for another request when no one else holds it
    /// (its request and that request's hedge are done); false otherwise.
    #[cfg(feature = "hedge")]
    pub(crate) fn reuse(&mut self) -> bool {
        match Arc::get_mut(&mut self.0) {
            Some(slot) => {
                slot.picked.take();
                *slot.superseded.get_mut() = false;
                true
            }
            None => false,
        }
    }
}

/// A request extension asking the balancer not to pick one backend: a
/// hedge's backup carries the backend its first attempt went to; a retry
/// the backend whose answer it retries.
///
/// [`Exclude::new`] (a hedge's backup): the balancer sends the request
/// where a copy can help — a backend serving the model (the cheapest
/// owner serving it, else the first backend past the owners serving it);
/// else, if the model was served on the excluded backend (the first
/// attempt was warm), the next backend along the ring whose model list
/// the balancer never had (no probe, residency header or declared
/// models: it may hold the model). When there is none — every other list
/// lacks the model, or the first attempt was cold and no other backend
/// serves it — it refuses the request at once with
/// [`NoAlternative`](crate::error::NoAlternative), picking nothing, and
/// the hedging layer counts it suppressed.
/// [`Exclude::strict`] (a retry after a failure): the backend is skipped
/// whenever another backend is eligible, resident or not — a backend that
/// just refused the request is no place to send it again. Updates ignore
/// both.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exclude {
    backend: BackendId,
    strict: bool,
}

impl Exclude {
    /// Excludes `backend` as a hedge's backup: the request goes to another
    /// backend where a copy can help (see above), or fails with
    /// [`NoAlternative`](crate::error::NoAlternative) when there is none.
    pub fn new(backend: BackendId) -> Self {
        Self {
            backend,
            strict: false,
        }
    }

    /// Excludes `backend` while any other backend is eligible.
    pub fn strict(backend: BackendId) -> Self {
        Self {
            backend,
            strict: true,
        }
    }

    /// Whether the exclusion holds even where no other backend has the
    /// model resident.
    #[cfg_attr(not(feature = "balance"), allow(dead_code))]
    pub(crate) fn is_strict(&self) -> bool {
        self.strict
    }

    /// The exclusion `route`'s request carries, if any.
    #[cfg(feature = "balance")]
    pub(crate) fn of<'a>(route: &Route<'a>) -> Option<&'a Exclude> {
        route.extensions?.get::<Exclude>()
    }

    /// The excluded backend.
    pub fn backend(&self) -> &BackendId {
        &self.backend
    }
}
