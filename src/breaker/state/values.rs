//! The values the state machine takes and gives: its states, modes and
//! reasons, the tickets it admits with, the transitions and refusals it
//! answers with, and the counts it reports.

use std::time::Duration;

use crate::backend::BackendId;

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

/// How a breaker is run: by its policy, or by hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Mode {
    /// The policy decides (the default).
    #[default]
    Normal,
    /// Open until the mode changes: nothing is admitted.
    ForcedOpen,
    /// Everything is admitted and nothing counted.
    Disabled,
    /// Everything is admitted; outcomes are counted (rates readable) but
    /// never trip the breaker.
    MetricsOnly,
}

/// Why a transition happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// The window's failure rate reached the threshold.
    FailureRate,
    /// The window's slow-call rate reached the threshold.
    SlowCallRate,
    /// `consecutive_failures` failures in a row.
    ConsecutiveFailures,
    /// The open duration passed: probes may go.
    OpenElapsed,
    /// The half-open probes failed (or were slow) too often.
    ProbesFailed,
    /// Every half-open probe reported, below both thresholds.
    ProbesSucceeded,
    /// The half-open round outlasted `half_open_max_wait`.
    HalfOpenTimeout,
    /// The mode was set by hand.
    Manual,
}

/// Admission of one call; give it back to
/// [`CircuitState::record`](super::machine::CircuitState::record) or
/// [`CircuitState::release`](super::machine::CircuitState::release).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket {
    pub(super) epoch: u64,
}

impl Ticket {
    /// The epoch the ticket was issued in.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }
}

/// A state change, returned by the call that caused it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Transition {
    /// State before.
    pub from: BreakerState,
    /// State after.
    pub to: BreakerState,
    /// What caused it.
    pub reason: Reason,
    /// The backend whose breaker it is, for the balancer's backend
    /// breakers; `None` for a standalone breaker or a layer's.
    pub backend: Option<BackendId>,
}

impl Transition {
    /// A transition of a breaker that names no backend (the balancer's
    /// hook adds its backend's).
    pub(crate) fn new(from: BreakerState, to: BreakerState, reason: Reason) -> Self {
        Self {
            from,
            to,
            reason,
            backend: None,
        }
    }
}

/// A refused admission.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) struct Refused {
    /// How long until a probe may go: the rest of the open duration, or
    /// while half-open with every permit out, the rest of the round.
    pub(crate) retry_after: Duration,
    /// The transition the asking caused: a half-open round past its
    /// maximum wait opens the breaker again.
    pub(crate) transition: Option<Transition>,
}

/// How many times a breaker entered each state
/// ([`BreakerStats::transitions`](crate::breaker::BreakerStats::transitions)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct TransitionCounts {
    /// Into closed: a half-open round that succeeded, or a release by hand.
    pub to_closed: u64,
    /// Into half-open: an open duration that ran out.
    pub to_half_open: u64,
    /// Into open: a trip, a half-open round that failed or ran out of
    /// time, or forcing by hand.
    pub to_open: u64,
}

/// A breaker's state, the counts over its window, and its counters since
/// it was made (or [reset](crate::breaker::Breaker::reset)), read by
/// [`Breaker::stats`](crate::breaker::Breaker::stats).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct BreakerStats {
    /// The state at the time of reading.
    pub state: BreakerState,
    /// The mode.
    pub mode: Mode,
    /// Calls in the window.
    pub calls: u64,
    /// Failures (and overloads) in the window.
    pub failures: u64,
    /// Timed calls in the window (not cold loads).
    pub timed_calls: u64,
    /// Slow calls in the window.
    pub slow_calls: u64,
    /// `failures / calls`, in `[0, 1]`.
    pub failure_rate: f64,
    /// `slow_calls / timed_calls`, in `[0, 1]`.
    pub slow_call_rate: f64,
    /// Failures in a row while closed (overloads and ignored calls skipped);
    /// kept through open and half-open until the breaker closes.
    pub consecutive_failures: u32,
    /// Reopenings in a row since the breaker last closed (the backoff's
    /// exponent).
    pub reopened: u32,
    /// Times it opened from closed or half-open on the evidence of its
    /// calls (forcing it open by hand is not a trip, nor is a half-open
    /// round running out of time).
    pub trips: u64,
    /// Times it entered each state, for any reason (forcing and releasing
    /// by hand included).
    pub transitions: TransitionCounts,
    /// Calls it refused.
    pub rejected: u64,
}
