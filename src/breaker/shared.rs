//! A breaker shared by clones of a service (and by the balancer, one per
//! backend), and the RAII permit it hands out.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use self::handle::Inner;
use super::config::BreakerConfig;
use super::events::{Hook, OnTransition};
use super::state::machine::CircuitState;
use super::state::values::{BreakerState, BreakerStats, Mode, Refused, Ticket, TransitionCounts};
use crate::classify::Outcome;
use crate::error::BreakerOpen;
use crate::sync::{AtomicBool, AtomicU64, Mutex};

impl Breaker {
    /// A closed breaker with `policy`.
    pub fn new(policy: BreakerConfig) -> Self {
        Self::build(policy, None, None)
    }

    /// A closed breaker with `policy` that reports every transition to
    /// `hook` (after the breaker's lock is released, so the hook may read
    /// the breaker), besides `tracing` (target `tower_model_balance`,
    /// level debug).
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use tower_model_balance::breaker::{Breaker, BreakerState, BreakerConfig, Transition};
    /// use tower_model_balance::classify::Outcome;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let log = seen.clone();
    /// let policy = BreakerConfig::builder().window(2).minimum_calls(2).build().unwrap();
    /// let breaker = Breaker::with_hook(policy, move |t: &Transition| log.lock().unwrap().push(t.to));
    /// breaker.try_acquire().unwrap().record(Outcome::Failure);
    /// breaker.try_acquire().unwrap().record(Outcome::Failure);
    /// assert_eq!(*seen.lock().unwrap(), [BreakerState::Open]);
    /// # }
    /// ```
    pub fn with_hook(policy: BreakerConfig, hook: impl OnTransition) -> Self {
        Self::build(policy, None, Some(Hook::new(hook)))
    }

    /// A closed breaker that keeps `not_closed` counting how many of the
    /// breakers sharing it are open or half-open.
    #[cfg(feature = "balance")]
    pub(crate) fn with_gauge(
        policy: BreakerConfig,
        not_closed: Arc<AtomicUsize>,
        hook: Option<Hook>,
    ) -> Self {
        Self::build(policy, Some(not_closed), hook)
    }

    /// A closed breaker: the one way every constructor takes.
    pub(super) fn build(
        policy: BreakerConfig,
        not_closed: Option<Arc<AtomicUsize>>,
        hook: Option<Hook>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                slow_call: policy.slow_call_duration,
                state: Mutex::new(CircuitState::new(policy)),
                published: AtomicU64::new(1),
                open_until_ns: AtomicU64::new(0),
                probes_out_until_ns: AtomicU64::new(0),
                base: Instant::now(),
                trips: AtomicU64::new(0),
                transitions: Default::default(),
                rejected: AtomicU64::new(0),
                saturated: AtomicBool::new(false),
                not_closed,
                hook,
                waiters: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Asks to let one call through now (tokio's clock).
    ///
    /// # Errors
    ///
    /// [`BreakerOpen`] with the time until a probe may go.
    pub fn try_acquire(&self) -> Result<Permit, BreakerOpen> {
        self.acquire_at(Instant::now())
    }

    /// As [`Breaker::try_acquire`], at `now`; the permit times the call
    /// from `now`.
    pub(crate) fn acquire_at(&self, now: Instant) -> Result<Permit, BreakerOpen> {
        let ticket = self.try_ticket_at(now)?;
        Ok(self.permit(ticket, now))
    }

    /// As [`Breaker::try_acquire`], at `now`; the permit times the call
    /// from `now`.
    /// A hook of the crate's own tests, benches and simulator (feature
    /// `testing`): not part of the public API.
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub fn try_acquire_at(&self, now: Instant) -> Result<Permit, BreakerOpen> {
        self.acquire_at(now)
    }

    /// Admission without a permit: the ticket to hand back to
    /// [`Breaker::record_ticket_at`] or [`Breaker::release_ticket`] (the
    /// balancer keeps the breaker elsewhere and saves the permit's clone).
    pub(crate) fn try_ticket_at(&self, now: Instant) -> Result<Ticket, BreakerOpen> {
        self.try_ticket_with(|| now)
    }

    /// As [`Breaker::try_ticket_at`], reading the time from `now` only
    /// when the breaker does not admit freely. Inlined: the free path is a
    /// load, and its ticket comes back in a register rather than through
    /// the stack; the locked path stays out of line.
    #[inline]
    pub(crate) fn try_ticket_with(
        &self,
        now: impl FnOnce() -> Instant,
    ) -> Result<Ticket, BreakerOpen> {
        let published = self.inner.published.load(Ordering::Acquire);
        if published & 1 == 1 {
            return Ok(CircuitState::ticket_for(published >> 1));
        }
        self.try_ticket_locked(now())
    }

    /// [`Breaker::try_ticket_with`] while the breaker does not admit
    /// freely: under the lock.
    #[cold]
    #[inline(never)]
    fn try_ticket_locked(&self, now: Instant) -> Result<Ticket, BreakerOpen> {
        let mut state = self.lock();
        let mut admitted = state.try_acquire(now);
        let transition = match &mut admitted {
            Ok((_, transition)) | Err(Refused { transition, .. }) => transition.take(),
        };
        self.publish(&state, transition.as_ref());
        drop(state);
        self.notify(transition);
        admitted.map(|(ticket, _)| ticket).map_err(|refused| {
            self.inner.rejected.fetch_add(1, Ordering::Relaxed);
            BreakerOpen::new(refused.retry_after)
        })
    }

    /// Records the outcome of the call `ticket` admitted, at `now`, the
    /// call having taken `elapsed` if it was timed.
    pub(crate) fn record_ticket_at(
        &self,
        ticket: Ticket,
        outcome: Outcome,
        elapsed: Option<Duration>,
        now: Instant,
    ) {
        self.record_ticket_with(ticket, outcome, elapsed, || now);
    }

    /// As [`Breaker::record_ticket_at`], reading the time from `now` only
    /// when the record takes the lock: not for a success that is not slow
    /// into a count window full of such, nor for a caller's error (ignored)
    /// while the breaker admits freely.
    pub(crate) fn record_ticket_with(
        &self,
        ticket: Ticket,
        outcome: Outcome,
        elapsed: Option<Duration>,
        now: impl FnOnce() -> Instant,
    ) {
        let inner = &self.inner;
        let free_now = inner.published.load(Ordering::Acquire) == ticket.epoch() << 1 | 1;
        let no_op = match outcome {
            Outcome::Success => {
                free_now
                    && inner.saturated.load(Ordering::Acquire)
                    && elapsed.is_none_or(|e| e < inner.slow_call)
            }
            Outcome::Ignored => free_now,
            _ => false,
        };
        if no_op {
            return;
        }
        let now = now();
        let mut state = self.lock();
        let transition = state.record(ticket, outcome, elapsed, now);
        let changed = transition.is_some();
        self.publish(&state, transition.as_ref());
        drop(state);
        self.notify(transition);
        if outcome == Outcome::Ignored && !changed {
            // A half-open permit may have come back.
            self.wake_waiters();
        }
    }

    /// Gives back the call `ticket` admitted, counting nothing.
    pub(crate) fn release_ticket(&self, ticket: Ticket) {
        // Only a half-open ticket has anything to give back; while the
        // breaker admits freely, no ticket can be one.
        if self.inner.published.load(Ordering::Acquire) & 1 == 0 {
            let mut state = self.lock();
            state.release(ticket);
            self.publish(&state, None);
            drop(state);
            self.wake_waiters();
        }
    }

    /// Whether a call would likely be admitted now, without taking the
    /// lock or a permit: closed (or disabled, or metrics only), or
    /// half-open with a probe permit left or its round expired, or open
    /// with its time up. The balancer filters candidates with it (and
    /// counts them for its panic mode); taking a permit decides. Reads the
    /// clock only when the breaker does not admit freely.
    pub fn admits(&self) -> bool {
        self.admits_with(Instant::now)
    }

    /// As [`Breaker::admits`], at `now`.
    /// A hook of the crate's own tests, benches and simulator (feature
    /// `testing`): not part of the public API.
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub fn admits_at(&self, now: Instant) -> bool {
        self.admits_with(|| now)
    }

    /// As [`Breaker::admits`], reading the time from `now` only when the
    /// breaker does not admit freely.
    pub(crate) fn admits_with(&self, now: impl FnOnce() -> Instant) -> bool {
        let inner = &self.inner;
        if inner.published.load(Ordering::Acquire) & 1 == 1 {
            return true;
        }
        let elapsed = now().saturating_duration_since(inner.base).as_nanos();
        let probes_out_until = inner.probes_out_until_ns.load(Ordering::Acquire);
        if probes_out_until != 0 {
            return elapsed >= u128::from(probes_out_until);
        }
        elapsed >= u128::from(inner.open_until_ns.load(Ordering::Acquire))
    }

    /// Whether the breaker admits every call (closed, disabled, metrics
    /// only), without taking the lock or reading the clock: false while it
    /// is open or half-open.
    #[cfg(feature = "balance")]
    pub(crate) fn admits_freely(&self) -> bool {
        self.inner.published.load(Ordering::Acquire) & 1 == 1
    }

    /// Whether the breaker is forced open by hand ([`Breaker::force_open`]),
    /// without taking the lock: the balancer leaves such a backend out
    /// even in panic mode (it was drained on purpose).
    #[cfg(feature = "balance")]
    pub(crate) fn is_forced_open(&self) -> bool {
        let inner = &self.inner;
        inner.published.load(Ordering::Acquire) & 1 == 0
            && inner.open_until_ns.load(Ordering::Acquire) == u64::MAX
    }

    /// The state now.
    pub fn state(&self) -> BreakerState {
        self.read_state(Instant::now())
    }

    /// The state at `now`: the balancer reads it at the clock it already
    /// read.
    pub(crate) fn read_state(&self, now: Instant) -> BreakerState {
        self.lock().state(now)
    }

    /// The state at `now`.
    /// A hook of the crate's own tests, benches and simulator (feature
    /// `testing`): not part of the public API.
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub fn state_at(&self, now: Instant) -> BreakerState {
        self.read_state(now)
    }

    /// The state, the mode, the window's counts and the counters (trips,
    /// transitions, refusals) now.
    pub fn stats(&self) -> BreakerStats {
        self.stats_at(Instant::now())
    }

    /// As [`Breaker::stats`], at `now`.
    pub(crate) fn stats_at(&self, now: Instant) -> BreakerStats {
        BreakerStats {
            trips: self.trips(),
            transitions: self.transitions(),
            rejected: self.rejected(),
            ..self.lock().stats(now)
        }
    }

    /// How many times the breaker has opened on the evidence of its calls
    /// ([`BreakerStats::trips`]).
    pub(crate) fn trips(&self) -> u64 {
        self.inner.trips.load(Ordering::Relaxed)
    }

    /// How many times the breaker entered each state
    /// ([`BreakerStats::transitions`]).
    pub(crate) fn transitions(&self) -> TransitionCounts {
        let read = |i: usize| self.inner.transitions[i].load(Ordering::Relaxed);
        TransitionCounts {
            to_closed: read(0),
            to_half_open: read(1),
            to_open: read(2),
        }
    }

    /// How many calls it has refused ([`BreakerStats::rejected`]).
    pub(crate) fn rejected(&self) -> u64 {
        self.inner.rejected.load(Ordering::Relaxed)
    }

    /// The configuration in force.
    pub fn config(&self) -> BreakerConfig {
        self.lock().policy().clone()
    }

    /// The mode.
    pub fn mode(&self) -> Mode {
        self.lock().mode()
    }

    /// Runs the breaker by hand until the mode changes again:
    ///
    /// * [`Mode::ForcedOpen`]: open, every call fails fast (not a trip);
    /// * [`Mode::Normal`]: closed now, with an empty window and the backoff
    ///   reset, and run by its policy again (from any mode);
    /// * [`Mode::Disabled`]: every call admitted, nothing counted;
    /// * [`Mode::MetricsOnly`]: every call admitted and its outcome counted
    ///   (readable from [`Breaker::stats`]), never tripping.
    pub fn set_mode(&self, mode: Mode) {
        self.apply_mode(mode);
    }

    /// Back to a new breaker's state: closed, normal mode, empty window,
    /// backoff reset, trip and rejection counts zero.
    pub fn reset(&self) {
        self.apply_mode(Mode::Normal);
        self.inner.trips.store(0, Ordering::Relaxed);
        for count in &self.inner.transitions {
            count.store(0, Ordering::Relaxed);
        }
        self.inner.rejected.store(0, Ordering::Relaxed);
    }
}

mod backpressure;
pub(super) mod handle;
pub(super) mod permit;
mod publish;

use self::handle::Breaker;
use self::permit::Permit;

#[cfg(test)]
mod tests;
