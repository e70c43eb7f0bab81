//! What a [`CircuitBreaker`](super::CircuitBreaker) does while its breaker
//! does not admit: shed or push back, and backpressure's reservation.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use super::shared::handle::Breaker;
use super::shared::permit::Permit;
use crate::error::BreakerOpen;

/// How a [`CircuitBreaker`](super::CircuitBreaker) treats callers while its
/// breaker does not admit (open, or half-open with every probe out); see
/// the [module docs](super#when-open-fail-fast-or-backpressure).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum WhenOpen {
    /// Sheds (the default): `poll_ready` stays ready and `call` fails at
    /// once with [`BreakerOpen`]. For a breaker used alone, in front of
    /// callers that handle the error.
    #[default]
    FailFast,
    /// Applies backpressure: `poll_ready` is `Pending` until the breaker
    /// admits, then reserves the call's permit. For use under a balancer
    /// that treats a pending service as unavailable (tower's
    /// `balance::p2c::Balance`, `ReadyCache`). Needs a Tokio runtime with
    /// time enabled.
    Backpressure,
}

/// Backpressure's state: the permit reserved by `poll_ready` and the timer
/// that wakes a waiting task when time alone lets the breaker admit. A
/// clone of the service starts with a fresh one.
#[derive(Debug, Default)]
pub(super) struct Reservation {
    permit: Option<Permit>,
    sleep: Option<Pin<Box<Sleep>>>,
}

/// How many times `poll_reserve` re-checks the breaker in one poll before
/// yielding (a timer that is already due, a probe lost to another caller).
const ROUNDS: usize = 4;

impl Reservation {
    /// Whether a permit is reserved (the service reported ready).
    pub(super) fn is_reserved(&self) -> bool {
        self.permit.is_some()
    }

    /// Reserves a permit from `breaker`, or registers the task to be woken
    /// when the breaker may admit: by the clock (a `Sleep` until the open
    /// duration ends, or while every half-open probe is out, until the
    /// round's deadline; re-armed whenever that instant moves) and by the
    /// breaker (any transition, change of mode, or probe permit given
    /// back). Never busy-polls.
    pub(super) fn poll_reserve(&mut self, breaker: &Breaker, cx: &mut Context<'_>) -> Poll<()> {
        if self.permit.is_some() {
            return Poll::Ready(());
        }
        let mut registered = false;
        for _ in 0..ROUNDS {
            let now = Instant::now();
            if breaker.admits_with(|| now) {
                // Only a race (the last probe taken since `admits`, a round
                // found expired) refuses here.
                if let Ok(permit) = breaker.acquire_at(now) {
                    self.permit = Some(permit);
                    self.sleep = None;
                    return Poll::Ready(());
                }
            }
            if !registered {
                // Register, then look again: no change can fall in between.
                breaker.wake_on_change(cx.waker());
                registered = true;
                continue;
            }
            let Some(at) = breaker.next_admission() else {
                // Forced open: only a change of mode admits, and wakes us.
                return Poll::Pending;
            };
            let sleep = self
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
            if sleep.deadline() != at {
                sleep.as_mut().reset(at);
            }
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
        // The timer keeps firing while the breaker refuses: state changing
        // under us. Yield rather than spin.
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// The reserved permit for a call at `now`, if it still belongs to the
    /// breaker's current state (see [`Permit::is_current_at`]), its clock
    /// restarted. A stale one is given back and replaced by a fresh permit
    /// only if the breaker admits freely now, never by a new probe.
    ///
    /// # Errors
    ///
    /// [`BreakerOpen`] when nothing was reserved (`call` without `Ready`
    /// from `poll_ready`), or the reservation is stale and the breaker
    /// does not admit freely.
    pub(super) fn take(&mut self, breaker: &Breaker, now: Instant) -> Result<Permit, BreakerOpen> {
        match self.permit.take() {
            Some(mut permit) if permit.is_current_at(now) => {
                permit.restart(now);
                Ok(permit)
            }
            Some(stale) => {
                drop(stale);
                breaker.try_acquire_freely(now)
            }
            None => Err(BreakerOpen::new(Duration::ZERO)),
        }
    }
}
