//! The RAII permit a breaker hands out for one call.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::handle::Breaker;
use crate::breaker::state::values::{BreakerState, Ticket};
use crate::classify::Outcome;

/// Admission of one call. Report how it went with [`Permit::record`];
/// dropped without a record (the call was cancelled), it is given back and
/// nothing is counted.
#[derive(Debug)]
#[must_use = "a permit dropped at once admits a call and counts nothing"]
pub struct Permit {
    pub(super) breaker: Breaker,
    pub(super) ticket: Option<Ticket>,
    pub(super) admitted: Instant,
}

impl Permit {
    /// Records the call's outcome now, timed from its admission.
    pub fn record(self, outcome: Outcome) {
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(self.admitted);
        self.record_call(outcome, Some(elapsed), now);
    }

    /// Records the call's outcome at `now`, timed from its admission (a
    /// slow call if `now − admitted` reaches the policy's slow-call
    /// duration). Takes the breaker's lock unless the outcome cannot change
    /// its state (a success that is not slow into a window full of such, a
    /// caller's error while closed).
    ///
    /// A hook of the crate's own tests, benches and simulator (feature
    /// `testing`): not part of the public API.
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub fn record_at(self, outcome: Outcome, now: Instant) {
        let elapsed = now.saturating_duration_since(self.admitted);
        self.record_call(outcome, Some(elapsed), now);
    }

    /// Records the call's outcome at `now`, with how long it took if it
    /// was timed: `None` for a call that must never count as slow (a cold
    /// model load), or that was not timed.
    pub(crate) fn record_call(mut self, outcome: Outcome, elapsed: Option<Duration>, now: Instant) {
        if let Some(ticket) = self.ticket.take() {
            self.breaker.record_ticket_at(ticket, outcome, elapsed, now);
        }
    }

    /// As `record_call`: the call's outcome at `now`, with how long it
    /// took if it was timed.
    /// A hook of the crate's own tests, benches and simulator (feature
    /// `testing`): not part of the public API.
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub fn record_call_at(self, outcome: Outcome, elapsed: Option<Duration>, now: Instant) {
        self.record_call(outcome, elapsed, now);
    }

    /// When the call was admitted (the slow-call clock's start).
    pub(crate) fn admitted(&self) -> Instant {
        self.admitted
    }

    /// Whether the breaker is still, at `now`, in the state this permit
    /// was admitted in: the same epoch (no transition or change of mode
    /// since) and, for a half-open probe, a round not past its deadline.
    pub(crate) fn is_current_at(&self, now: Instant) -> bool {
        let Some(ticket) = self.ticket else {
            return false;
        };
        let published = self.breaker.inner.published.load(Ordering::Acquire);
        if published >> 1 != ticket.epoch() {
            return false;
        }
        // Same epoch and not admitting freely: the half-open round this
        // probe belongs to, unless it has run out of time.
        published & 1 == 1 || self.breaker.lock().state(now) == BreakerState::HalfOpen
    }

    /// Restarts the slow-call clock at `now`: a permit reserved ahead of
    /// its call times the call, not the wait for it.
    pub(crate) fn restart(&mut self, now: Instant) {
        self.admitted = now;
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.breaker.release_ticket(ticket);
        }
    }
}
