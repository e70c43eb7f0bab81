//! A breaker shared by clones of a service (and by the balancer, one per
//! backend), and the RAII permit it hands out.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::time::Instant;

use super::state::{CircuitState, Ticket, Transition};
use super::{BreakerState, Outcome, Policy};
use crate::error::BreakerOpen;

/// A circuit breaker: the [`CircuitState`] machine behind a mutex, with the
/// closed state published in an atomic so that admission while closed takes
/// no lock. Cloning shares the breaker.
///
/// ```
/// use tower_model_balance::breaker::{Breaker, BreakerState, Outcome, Policy};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let breaker = Breaker::new(Policy::builder().window(4).minimum_calls(2).build().unwrap());
/// for _ in 0..2 {
///     breaker.try_acquire().unwrap().record(Outcome::Failure);
/// }
/// assert_eq!(breaker.state(), BreakerState::Open);
/// assert!(breaker.try_acquire().is_err());
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Breaker {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<CircuitState>,
    /// `epoch << 1 | closed`, republished under the lock after every change.
    published: AtomicU64,
    /// While open: when probes may go, in ns after `base`.
    open_until_ns: AtomicU64,
    base: Instant,
    trips: AtomicU64,
    /// Set under the lock while the state is [`CircuitState::saturated`]:
    /// a success then records nothing and skips the lock.
    saturated: AtomicBool,
    /// Set under the lock while half-open with every probe permit out
    /// ([`CircuitState::probes_out`]): [`Breaker::admits`] is false then.
    probes_out: AtomicBool,
    /// Counts the breakers of a fleet that are not closed (the balancer's
    /// panic check reads it).
    not_closed: Option<Arc<AtomicUsize>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(gauge) = &self.not_closed {
            if self.published.load(Ordering::Acquire) & 1 == 0 {
                gauge.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

impl Breaker {
    /// A closed breaker with `policy`.
    pub fn new(policy: Policy) -> Self {
        Self::build(policy, None)
    }

    /// A closed breaker that keeps `not_closed` counting how many of the
    /// breakers sharing it are open or half-open.
    #[cfg(feature = "balance")]
    pub(crate) fn with_gauge(policy: Policy, not_closed: Arc<AtomicUsize>) -> Self {
        Self::build(policy, Some(not_closed))
    }

    fn build(policy: Policy, not_closed: Option<Arc<AtomicUsize>>) -> Self {
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(CircuitState::new(policy)),
                published: AtomicU64::new(1),
                open_until_ns: AtomicU64::new(0),
                base: Instant::now(),
                trips: AtomicU64::new(0),
                saturated: AtomicBool::new(false),
                probes_out: AtomicBool::new(false),
                not_closed,
            }),
        }
    }

    /// Asks to let one call through now (tokio's clock).
    ///
    /// # Errors
    ///
    /// [`BreakerOpen`] with the time until a probe may go.
    pub fn try_acquire(&self) -> Result<Permit, BreakerOpen> {
        self.try_acquire_at(Instant::now())
    }

    /// As [`Breaker::try_acquire`], at `now`.
    ///
    /// # Errors
    ///
    /// As [`Breaker::try_acquire`].
    pub fn try_acquire_at(&self, now: Instant) -> Result<Permit, BreakerOpen> {
        let ticket = self.try_ticket_at(now)?;
        Ok(self.permit(ticket))
    }

    /// Admission without a permit: the ticket to hand back to
    /// [`Breaker::record_ticket_at`] or [`Breaker::release_ticket`] (the
    /// balancer keeps the breaker elsewhere and saves the permit's clone).
    pub(crate) fn try_ticket_at(&self, now: Instant) -> Result<Ticket, BreakerOpen> {
        self.try_ticket_with(|| now)
    }

    /// As [`Breaker::try_ticket_at`], reading the time from `now` only
    /// when the breaker is not closed.
    pub(crate) fn try_ticket_with(
        &self,
        now: impl FnOnce() -> Instant,
    ) -> Result<Ticket, BreakerOpen> {
        let published = self.inner.published.load(Ordering::Acquire);
        if published & 1 == 1 {
            return Ok(CircuitState::ticket_for(published >> 1));
        }
        let mut state = self.lock();
        let admitted = state.try_acquire(now());
        self.sync_probes(&state);
        match admitted {
            Ok((ticket, transition)) => {
                self.publish(&state, transition);
                Ok(ticket)
            }
            Err(retry_after) => Err(BreakerOpen::new(retry_after)),
        }
    }

    /// Records the outcome of the call `ticket` admitted, at `now`.
    ///
    /// Takes the lock, except for an outcome that cannot change the state:
    /// a success while the window is full of successes, or a caller's error
    /// (ignored) while closed.
    pub(crate) fn record_ticket_at(&self, ticket: Ticket, outcome: Outcome, now: Instant) {
        self.record_ticket_with(ticket, outcome, || now);
    }

    /// As [`Breaker::record_ticket_at`], reading the time from `now` only
    /// when the record takes the lock.
    pub(crate) fn record_ticket_with(
        &self,
        ticket: Ticket,
        outcome: Outcome,
        now: impl FnOnce() -> Instant,
    ) {
        let inner = &self.inner;
        let closed_now = inner.published.load(Ordering::Acquire) == ticket.epoch() << 1 | 1;
        let no_op = match outcome {
            Outcome::Success => closed_now && inner.saturated.load(Ordering::Acquire),
            Outcome::Ignored => closed_now,
            _ => false,
        };
        if no_op {
            return;
        }
        let now = now();
        let mut state = self.lock();
        let transition = state.record(ticket, outcome, now);
        inner.saturated.store(state.saturated(), Ordering::Release);
        self.sync_probes(&state);
        self.publish(&state, transition);
    }

    /// Gives back the call `ticket` admitted, counting nothing.
    pub(crate) fn release_ticket(&self, ticket: Ticket) {
        // Only a half-open ticket has anything to give back; while the
        // published state is closed, no ticket can be one.
        if self.inner.published.load(Ordering::Acquire) & 1 == 0 {
            let mut state = self.lock();
            state.release(ticket);
            self.sync_probes(&state);
        }
    }

    /// Whether a call would likely be admitted at `now`, without taking the
    /// lock or a permit: closed, or half-open with a probe permit left, or
    /// open with its time up. The balancer filters candidates with it (and
    /// counts them for its panic mode); [`Breaker::try_acquire_at`] decides.
    pub fn admits(&self, now: Instant) -> bool {
        self.admits_with(|| now)
    }

    /// As [`Breaker::admits`], reading the time from `now` only when the
    /// breaker is not closed.
    pub(crate) fn admits_with(&self, now: impl FnOnce() -> Instant) -> bool {
        if self.inner.published.load(Ordering::Acquire) & 1 == 1 {
            return true;
        }
        if self.inner.probes_out.load(Ordering::Acquire) {
            return false;
        }
        let elapsed = now().saturating_duration_since(self.inner.base).as_nanos();
        elapsed >= u128::from(self.inner.open_until_ns.load(Ordering::Acquire))
    }

    /// The state now.
    pub fn state(&self) -> BreakerState {
        self.state_at(Instant::now())
    }

    /// The state at `now`.
    pub fn state_at(&self, now: Instant) -> BreakerState {
        self.lock().state(now)
    }

    /// How many times the breaker has opened from closed or half-open.
    pub fn trips(&self) -> u64 {
        self.inner.trips.load(Ordering::Relaxed)
    }

    /// The policy in force.
    pub fn policy(&self) -> Policy {
        self.lock().policy().clone()
    }

    fn permit(&self, ticket: Ticket) -> Permit {
        Permit {
            breaker: self.clone(),
            ticket: Some(ticket),
        }
    }

    fn lock(&self) -> MutexGuard<'_, CircuitState> {
        // The state machine has no invariant a panic elsewhere could break
        // half-way (it does not panic), so a poisoned lock is still sound.
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Republishes whether every probe permit is out (under the lock).
    fn sync_probes(&self, state: &CircuitState) {
        self.inner
            .probes_out
            .store(state.probes_out(), Ordering::Release);
    }

    fn publish(&self, state: &CircuitState, transition: Option<Transition>) {
        let Some(transition) = transition else { return };
        let until = state.open_until().map_or(0, |until| {
            let ns = until.saturating_duration_since(self.inner.base).as_nanos();
            u64::try_from(ns).unwrap_or(u64::MAX)
        });
        self.inner.open_until_ns.store(until, Ordering::Release);
        let closed = u64::from(transition.to == BreakerState::Closed);
        let was = self
            .inner
            .published
            .swap(state.epoch() << 1 | closed, Ordering::AcqRel)
            & 1;
        if let Some(gauge) = self.inner.not_closed.as_ref().filter(|_| was != closed) {
            if closed == 1 {
                gauge.fetch_sub(1, Ordering::Relaxed);
            } else {
                gauge.fetch_add(1, Ordering::Relaxed);
            }
        }
        if transition.to == BreakerState::Open {
            self.inner.trips.fetch_add(1, Ordering::Relaxed);
        }
        tracing::debug!(from = ?transition.from, to = ?transition.to, "circuit breaker transition");
    }
}

/// Admission of one call. Report how it went with [`Permit::record`];
/// dropped without a record (the call was cancelled), it is given back and
/// nothing is counted.
#[derive(Debug)]
#[must_use = "a permit dropped at once admits a call and counts nothing"]
pub struct Permit {
    breaker: Breaker,
    ticket: Option<Ticket>,
}

impl Permit {
    /// Records the call's outcome now.
    pub fn record(self, outcome: Outcome) {
        self.record_at(outcome, Instant::now());
    }

    /// Records the call's outcome at `now`. Takes the breaker's lock
    /// unless the outcome cannot change its state (a success into a window
    /// full of successes, a caller's error while closed).
    pub fn record_at(mut self, outcome: Outcome, now: Instant) {
        if let Some(ticket) = self.ticket.take() {
            self.breaker.record_ticket_at(ticket, outcome, now);
        }
    }

    /// The breaker this permit belongs to.
    pub fn breaker(&self) -> &Breaker {
        &self.breaker
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.breaker.release_ticket(ticket);
        }
    }
}
