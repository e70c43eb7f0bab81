//! The breaker's state machine: pure logic, no clock, no locks, no IO.
//!
//! Closed → Open when, with at least `minimum_calls` in the count-based
//! window, the failure rate reaches the threshold. Open → HalfOpen once
//! `open_duration` has passed (on the next admission request). HalfOpen lets
//! `half_open_permits` probe calls through: as soon as their failures alone
//! reach the threshold share it opens again; when all have reported with a
//! failure rate below the threshold it closes with an empty window.
//!
//! Every admission returns a [`Ticket`] stamped with the current epoch; the
//! epoch advances on every transition, so an outcome from an earlier state
//! (a call admitted while closed that ends after the breaker opened) is not
//! counted against the new state. A ticket given back without an outcome
//! (a cancelled call) frees its half-open permit and counts nothing.

use std::time::Duration;

use tokio::time::Instant;

use super::{Outcome, Policy};

/// A breaker's state, in the standard sense of the words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BreakerState {
    /// Traffic flows; outcomes are counted.
    Closed,
    /// Requests fail fast until the open duration has passed.
    Open,
    /// A limited number of probe calls decide whether to close or reopen.
    HalfOpen,
}

/// Admission of one call; give it back to [`CircuitState::record`] or
/// [`CircuitState::release`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    epoch: u64,
}

impl Ticket {
    /// The epoch the ticket was issued in.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }
}

/// A state change, returned by the call that caused it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Transition {
    /// State before.
    pub from: BreakerState,
    /// State after.
    pub to: BreakerState,
}

#[derive(Debug, Clone)]
enum State {
    Closed,
    Open {
        until: Instant,
    },
    HalfOpen {
        issued: u32,
        successes: u32,
        failures: u32,
    },
}

/// One breaker's state machine.
#[derive(Debug, Clone)]
pub struct CircuitState {
    policy: Policy,
    state: State,
    epoch: u64,
    window: Window,
}

impl CircuitState {
    /// A closed breaker with an empty window.
    pub fn new(policy: Policy) -> Self {
        Self {
            window: Window::new(policy.window),
            policy,
            state: State::Closed,
            epoch: 0,
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The state at `now` (an open breaker whose time is up reads as
    /// half-open).
    pub fn state(&self, now: Instant) -> BreakerState {
        match self.state {
            State::Closed => BreakerState::Closed,
            State::Open { until } if now < until => BreakerState::Open,
            State::Open { .. } | State::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// The transition epoch; changes on every transition.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether recording one more success would change nothing: closed,
    /// with a full window of successes (the success pushed out is a
    /// success too).
    pub(crate) fn saturated(&self) -> bool {
        matches!(self.state, State::Closed)
            && self.window.len == self.window.failed.len()
            && self.window.failures == 0
    }

    /// Whether the breaker is half-open with every probe permit out: no
    /// call is admitted until one comes back.
    pub(crate) fn probes_out(&self) -> bool {
        matches!(self.state, State::HalfOpen { issued, .. } if issued >= self.policy.half_open_permits)
    }

    /// When an open breaker lets probes through; `None` when not open.
    pub fn open_until(&self) -> Option<Instant> {
        match self.state {
            State::Open { until } => Some(until),
            _ => None,
        }
    }

    /// Asks to let one call through at `now`.
    ///
    /// # Errors
    ///
    /// The time until a probe may go (zero while half-open with every permit
    /// out) when the call must fail fast.
    pub fn try_acquire(&mut self, now: Instant) -> Result<(Ticket, Option<Transition>), Duration> {
        let mut transition = None;
        if let State::Open { until } = self.state {
            if now < until {
                return Err(until - now);
            }
            transition = Some(self.enter(half_open()));
        }
        match &mut self.state {
            State::Closed => {}
            State::HalfOpen { issued, .. } if *issued < self.policy.half_open_permits => {
                *issued += 1;
            }
            State::HalfOpen { .. } | State::Open { .. } => return Err(Duration::ZERO),
        }
        Ok((Ticket { epoch: self.epoch }, transition))
    }

    /// A ticket for epoch `epoch`, for a caller that read `Closed` and that
    /// epoch from a published copy of the state without taking its lock. If
    /// the state moved on meanwhile, the ticket is stale and counts nothing.
    pub(crate) fn ticket_for(epoch: u64) -> Ticket {
        Ticket { epoch }
    }

    /// Records the outcome of an admitted call that ended at `now`.
    pub fn record(&mut self, ticket: Ticket, outcome: Outcome, now: Instant) -> Option<Transition> {
        if ticket.epoch != self.epoch {
            return None;
        }
        let threshold = self.policy.failure_rate_threshold;
        match &mut self.state {
            State::Closed => {
                let failed = match outcome {
                    Outcome::Success => false,
                    Outcome::Failure => true,
                    Outcome::Ignored => return None,
                };
                self.window.push(failed);
                let tripped = self.window.calls() >= self.policy.minimum_calls
                    && self.window.failure_rate() >= threshold;
                tripped.then(|| self.open(now))
            }
            State::HalfOpen {
                issued,
                successes,
                failures,
            } => {
                match outcome {
                    Outcome::Success => *successes += 1,
                    Outcome::Failure => *failures += 1,
                    Outcome::Ignored => {
                        *issued -= 1;
                        return None;
                    }
                }
                let permits = f64::from(self.policy.half_open_permits);
                if f64::from(*failures) / permits >= threshold {
                    Some(self.open(now))
                } else if *successes + *failures >= self.policy.half_open_permits {
                    self.window.clear();
                    Some(self.enter(State::Closed))
                } else {
                    None
                }
            }
            State::Open { .. } => None,
        }
    }

    /// Gives back an admitted call that ended without an outcome: nothing
    /// is counted, a half-open permit is freed.
    pub fn release(&mut self, ticket: Ticket) {
        if ticket.epoch != self.epoch {
            return;
        }
        if let State::HalfOpen { issued, .. } = &mut self.state {
            *issued = issued.saturating_sub(1);
        }
    }

    fn open(&mut self, now: Instant) -> Transition {
        // A `now` near the end of time opens until then, not past it.
        let until = now.checked_add(self.policy.open_duration).unwrap_or(now);
        self.enter(State::Open { until })
    }

    fn enter(&mut self, state: State) -> Transition {
        let from = kind(&self.state);
        self.state = state;
        self.epoch += 1;
        Transition {
            from,
            to: kind(&self.state),
        }
    }
}

fn half_open() -> State {
    State::HalfOpen {
        issued: 0,
        successes: 0,
        failures: 0,
    }
}

fn kind(state: &State) -> BreakerState {
    match state {
        State::Closed => BreakerState::Closed,
        State::Open { .. } => BreakerState::Open,
        State::HalfOpen { .. } => BreakerState::HalfOpen,
    }
}

/// The last `capacity` outcomes, as a ring buffer with a running failure
/// count; allocated once.
#[derive(Debug, Clone)]
struct Window {
    failed: Box<[bool]>,
    next: usize,
    len: usize,
    failures: usize,
}

impl Window {
    fn new(capacity: usize) -> Self {
        Self {
            failed: vec![false; capacity.max(1)].into_boxed_slice(),
            next: 0,
            len: 0,
            failures: 0,
        }
    }

    fn push(&mut self, failed: bool) {
        if self.len == self.failed.len() {
            self.failures -= usize::from(self.failed[self.next]);
        } else {
            self.len += 1;
        }
        self.failed[self.next] = failed;
        self.failures += usize::from(failed);
        self.next = (self.next + 1) % self.failed.len();
    }

    fn calls(&self) -> usize {
        self.len
    }

    fn failure_rate(&self) -> f64 {
        if self.len == 0 {
            0.0
        } else {
            self.failures as f64 / self.len as f64
        }
    }

    fn clear(&mut self) {
        self.next = 0;
        self.len = 0;
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests;
