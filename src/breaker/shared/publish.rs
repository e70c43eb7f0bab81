//! How a breaker publishes its state: the lock, the "admits freely" word
//! that admission reads without it, the transition hook and counters.

use std::sync::atomic::Ordering;
use std::sync::PoisonError;

use tokio::time::Instant;

use super::handle::Breaker;
use super::permit::Permit;
use crate::breaker::state::machine::CircuitState;
use crate::breaker::state::values::{BreakerState, Mode, Reason, Ticket, Transition};
use crate::sync::MutexGuard;

impl Breaker {
    pub(super) fn apply_mode(&self, mode: Mode) {
        let mut state = self.lock();
        let transition = state.set_mode(mode, Instant::now());
        let changed = transition.is_some();
        self.publish(&state, transition.as_ref());
        if !changed {
            // The epoch moved all the same (a transition republishes).
            self.republish(&state);
        }
        drop(state);
        self.notify(transition);
        if !changed {
            self.wake_waiters();
        }
    }

    pub(super) fn permit(&self, ticket: Ticket, admitted: Instant) -> Permit {
        Permit {
            breaker: self.clone(),
            ticket: Some(ticket),
            admitted,
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, CircuitState> {
        // The state machine has no invariant a panic elsewhere could break
        // half-way (it does not panic), so a poisoned lock is still sound.
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Under the lock, after every change: republishes what the lock-free
    /// paths read, and counts a transition.
    pub(super) fn publish(&self, state: &CircuitState, transition: Option<&Transition>) {
        let inner = &self.inner;
        inner.saturated.store(state.saturated(), Ordering::Release);
        let probes_out_until = if state.probes_out() {
            state
                .half_open_deadline()
                .map_or(0, |deadline| self.ns(deadline).max(1))
        } else {
            0
        };
        inner
            .probes_out_until_ns
            .store(probes_out_until, Ordering::Release);
        let Some(transition) = transition else { return };
        self.republish(state);
        let tripped = !matches!(transition.reason, Reason::Manual | Reason::HalfOpenTimeout);
        if transition.to == BreakerState::Open && tripped {
            inner.trips.fetch_add(1, Ordering::Relaxed);
        }
        let entered = match transition.to {
            BreakerState::Closed => 0,
            BreakerState::HalfOpen => 1,
            _ => 2,
        };
        inner.transitions[entered].fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            from = ?transition.from,
            to = ?transition.to,
            reason = ?transition.reason,
            "circuit breaker transition"
        );
    }

    /// Publishes the epoch, whether calls are admitted freely, and until
    /// when the breaker is open; keeps the fleet's gauge.
    pub(super) fn republish(&self, state: &CircuitState) {
        let inner = &self.inner;
        let until = match state.mode() {
            Mode::ForcedOpen => u64::MAX,
            _ => state.open_until().map_or(0, |until| self.ns(until)),
        };
        inner.open_until_ns.store(until, Ordering::Release);
        let free = u64::from(state.admits_freely());
        let was = inner
            .published
            .swap(state.epoch() << 1 | free, Ordering::AcqRel)
            & 1;
        if let Some(gauge) = inner.not_closed.as_ref().filter(|_| was != free) {
            if free == 1 {
                gauge.fetch_sub(1, Ordering::Relaxed);
            } else {
                gauge.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// `at` in ns after the breaker's base.
    pub(super) fn ns(&self, at: Instant) -> u64 {
        let ns = at.saturating_duration_since(self.inner.base).as_nanos();
        u64::try_from(ns).unwrap_or(u64::MAX)
    }

    /// Reports a transition to the hook and wakes the waiters, outside
    /// the lock.
    pub(super) fn notify(&self, transition: Option<Transition>) {
        let Some(transition) = transition else { return };
        if let Some(hook) = &self.inner.hook {
            hook.call(&transition);
        }
        self.wake_waiters();
    }
}
