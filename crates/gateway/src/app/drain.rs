//! The gateway's drain: what a shutdown signal sets in motion, shared by
//! the accept loop, readiness and every answer's body.
//!
//! ```text
//! serving ──signal──► draining ──drain timeout──► cut
//!                     readiness 503, no new        what is still open ends:
//!                     connections, in flight       an event stream with an
//!                     finishes                     SSE error event, a head
//!                                                  not yet come with 503
//! ```

use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// The drain's state, cheap to clone: every clone sees the same.
#[derive(Debug, Clone, Default)]
pub struct Drain {
    draining: CancellationToken,
    cut: CancellationToken,
}

impl Drain {
    /// A gateway serving, not draining.
    pub fn new() -> Self {
        Self::default()
    }

    /// Begins the drain: readiness answers 503 from now on.
    pub fn begin(&self) {
        self.draining.cancel();
    }

    /// Ends the drain: what is still open is cut, each with an error its
    /// client can see.
    pub fn cut(&self) {
        self.draining.cancel();
        self.cut.cancel();
    }

    /// Whether the drain has begun.
    pub fn is_draining(&self) -> bool {
        self.draining.is_cancelled()
    }

    /// Whether what is still open has been cut.
    pub fn is_cut(&self) -> bool {
        self.cut.is_cancelled()
    }

    /// Resolves when what is still open is cut (never, if the gateway
    /// never drains or every answer ends within the drain).
    pub fn when_cut(&self) -> WaitForCancellationFutureOwned {
        self.cut.clone().cancelled_owned()
    }
}
