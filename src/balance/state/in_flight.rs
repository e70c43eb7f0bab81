//! One picked request in flight: counted in its backend's and its fleet's
//! traffic from its start until its token drops.

use std::sync::Arc;

use crate::balance::state::backend::BackendState;
use crate::balance::state::traffic::Branch;

/// A picked request counted in flight on its backend and in the fleet
/// (by the branch it took) until dropped: then counted out, and its room
/// free for a request waiting for it. Its guard holds it.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<BackendState>);

impl InFlight {
    /// The request picked on `state` by `branch` starts.
    #[inline]
    pub(crate) fn start(state: Arc<BackendState>, branch: Branch) -> Self {
        state.fleet.gauges.traffic.start(branch);
        state.traffic.start();
        Self(state)
    }

    /// The backend it is in flight on.
    #[inline]
    pub(crate) fn state(&self) -> &Arc<BackendState> {
        &self.0
    }
}

impl Drop for InFlight {
    /// Ended (finished or dropped): out of the backend's and the fleet's
    /// in-flight load, its room free for a waiting request.
    #[inline]
    fn drop(&mut self) {
        self.0.traffic.end();
        let fleet = &self.0.fleet;
        fleet.gauges.traffic.end();
        fleet.queue.room_freed();
    }
}
