//! What a service that pushes back needs of its breaker (crate-internal):
//! wakers for the changes time alone does not bring, the next admission,
//! and a permit taken only while the breaker admits freely.

use std::sync::atomic::Ordering;
use std::sync::PoisonError;
use std::task::Waker;
use std::time::Duration;

use tokio::time::Instant;

use super::handle::Breaker;
use super::permit::Permit;
use crate::breaker::state::machine::CircuitState;
use crate::breaker::state::values::Mode;
use crate::error::BreakerOpen;

impl Breaker {
    /// Wakes `waker` on the breaker's next transition, change of mode or
    /// half-open permit given back — the changes that time alone does not
    /// bring (see [`Breaker::next_admission`]). Register before checking
    /// [`Breaker::admits`], so that no change falls in between.
    pub(crate) fn wake_on_change(&self, waker: &Waker) {
        let mut waiters = self
            .inner
            .waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !waiters.iter().any(|w| w.will_wake(waker)) {
            waiters.push(waker.clone());
        }
    }

    pub(super) fn wake_waiters(&self) {
        let waiters = std::mem::take(
            &mut *self
                .inner
                .waiters
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        waiters.into_iter().for_each(Waker::wake);
    }

    /// When a breaker that does not admit now will admit by the passing of
    /// time alone: the end of the open duration, or while half-open with
    /// every probe out, the round's deadline. `None` when forced open
    /// (only a change of mode admits again). Meaningless while
    /// [`Breaker::admits`] is true.
    pub(crate) fn next_admission(&self) -> Option<Instant> {
        let inner = &self.inner;
        let at = match inner.probes_out_until_ns.load(Ordering::Acquire) {
            0 => inner.open_until_ns.load(Ordering::Acquire),
            probes_out_until => probes_out_until,
        };
        (at != u64::MAX).then(|| inner.base + Duration::from_nanos(at))
    }

    /// A permit only if the breaker admits freely now (closed, disabled or
    /// metrics only): never a half-open probe. For a call whose
    /// reservation went stale.
    ///
    /// # Errors
    ///
    /// [`BreakerOpen`] with the time until a probe may go (zero when
    /// half-open with a permit left), counted as a rejection.
    pub(crate) fn try_acquire_freely(&self, now: Instant) -> Result<Permit, BreakerOpen> {
        let published = self.inner.published.load(Ordering::Acquire);
        if published & 1 == 1 {
            return Ok(self.permit(CircuitState::ticket_for(published >> 1), now));
        }
        let state = self.lock();
        let retry_at = match state.mode() {
            Mode::ForcedOpen => Some(now + state.policy().max_open_duration),
            _ if state.probes_out() => state.half_open_deadline(),
            _ => state.open_until(),
        };
        drop(state);
        self.inner.rejected.fetch_add(1, Ordering::Relaxed);
        Err(BreakerOpen::new(retry_at.map_or(Duration::ZERO, |at| {
            at.saturating_duration_since(now)
        })))
    }
}
