//! The [`Breaker`] handle, and what its clones share: the state machine
//! behind a mutex and the atomics that admission reads without it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Waker;
use std::time::Duration;

use tokio::time::Instant;

use crate::breaker::events::Hook;
use crate::breaker::state::machine::CircuitState;
use crate::sync::{AtomicBool, AtomicU64, Mutex};

/// A circuit breaker: the breaker's state machine behind a mutex, with
/// "admits freely" (closed, disabled, metrics only) published in an atomic
/// so that admission then takes no lock. Cloning shares the breaker.
///
/// Read it with [`Breaker::state`], [`Breaker::stats`] (the window,
/// the trips and refusals); run it by hand with [`Breaker::set_mode`]
/// and [`Breaker::reset`].
///
/// ```
/// use tower_model_balance::breaker::{Breaker, BreakerState, BreakerConfig, Mode};
/// use tower_model_balance::classify::Outcome;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let breaker = Breaker::new(BreakerConfig::builder().window(4).minimum_calls(2).build().unwrap());
/// for _ in 0..2 {
///     breaker.try_acquire().unwrap().record(Outcome::Failure);
/// }
/// assert_eq!(breaker.state(), BreakerState::Open);
/// assert!(breaker.try_acquire().is_err());
/// breaker.set_mode(Mode::Normal);
/// assert!(breaker.try_acquire().is_ok());
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Breaker {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) state: Mutex<CircuitState>,
    /// `epoch << 1 | admits freely`, republished under the lock after
    /// every change.
    pub(super) published: AtomicU64,
    /// While open: when probes may go, in ns after `base` (`u64::MAX`
    /// when forced open).
    pub(super) open_until_ns: AtomicU64,
    /// While half-open with every probe permit out: when the round
    /// expires, in ns after `base`; 0 otherwise. [`Breaker::admits`] is
    /// false until then.
    pub(super) probes_out_until_ns: AtomicU64,
    pub(super) base: Instant,
    /// The policy's slow-call duration, for the lock-free record path.
    pub(super) slow_call: Duration,
    pub(super) trips: AtomicU64,
    /// Transitions by the state entered: closed, half-open, open.
    pub(super) transitions: [AtomicU64; 3],
    pub(super) rejected: AtomicU64,
    /// Set under the lock while the state is [`CircuitState::saturated`]:
    /// a success that is not slow then records nothing and skips the lock.
    pub(super) saturated: AtomicBool,
    /// Counts the breakers of a fleet that are not closed (the balancer's
    /// panic check reads it).
    pub(super) not_closed: Option<Arc<AtomicUsize>>,
    pub(super) hook: Option<Hook>,
    /// Tasks waiting for the breaker to admit (backpressure services),
    /// woken and cleared on every transition, change of mode or half-open
    /// permit given back.
    pub(super) waiters: Mutex<Vec<Waker>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Breaker")
            .field("state", &self.state)
            .field("trips", &self.trips)
            .field("rejected", &self.rejected)
            .field("hook", &self.hook.is_some())
            .finish_non_exhaustive()
    }
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
