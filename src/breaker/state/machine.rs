//! The state machine itself: [`CircuitState`], driven by admissions,
//! outcomes and `now`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::values::{
    BreakerState, BreakerStats, Mode, Reason, Refused, Ticket, Transition, TransitionCounts,
};
use crate::breaker::config::BreakerConfig;
use crate::breaker::window::{Entry, Window};
use crate::classify::Outcome;

#[derive(Debug, Clone)]
enum State {
    Closed,
    Open {
        until: Instant,
    },
    HalfOpen {
        since: Instant,
        issued: u32,
        successes: u32,
        failures: u32,
        slow: u32,
    },
}

/// One breaker's state machine.
#[derive(Debug, Clone)]
pub(crate) struct CircuitState {
    policy: BreakerConfig,
    state: State,
    mode: Mode,
    epoch: u64,
    window: Window,
    consecutive: u32,
    reopened: u32,
    /// SplitMix64 state for the open durations' jitter.
    rng: u64,
}

/// Seeds breakers made without one apart from each other — and, from a
/// random start per process, apart from those of other processes (gateway
/// replicas keep breakers for the same backends).
static SEEDS: AtomicU64 = AtomicU64::new(0);

fn next_seed() -> u64 {
    static START: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let start = *START.get_or_init(|| {
        use std::hash::BuildHasher;
        std::collections::hash_map::RandomState::new().hash_one(0x2545_f491_4f6c_dd1du64)
    });
    start.wrapping_add(SEEDS.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed))
}

impl CircuitState {
    /// A closed breaker with an empty window, its jitter seeded apart from
    /// every other breaker's, in this process and others.
    pub(crate) fn new(policy: BreakerConfig) -> Self {
        Self::with_seed(policy, next_seed())
    }

    /// A closed breaker whose jitter draws from `seed` (deterministic).
    pub(crate) fn with_seed(policy: BreakerConfig, seed: u64) -> Self {
        Self {
            window: Window::new(policy.window),
            policy,
            state: State::Closed,
            mode: Mode::Normal,
            epoch: 0,
            consecutive: 0,
            reopened: 0,
            rng: seed,
        }
    }

    /// The policy in force.
    pub(crate) fn policy(&self) -> &BreakerConfig {
        &self.policy
    }

    /// The mode.
    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    /// The state at `now`: an open breaker whose time is up reads as
    /// half-open, a half-open one past its maximum wait as open.
    pub(crate) fn state(&self, now: Instant) -> BreakerState {
        match self.state {
            _ if self.mode == Mode::ForcedOpen => BreakerState::Open,
            State::Closed => BreakerState::Closed,
            State::Open { until } if now < until => BreakerState::Open,
            State::Open { .. } => BreakerState::HalfOpen,
            State::HalfOpen { since, .. } if self.round_expired(since, now) => BreakerState::Open,
            State::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    /// The window's counts and the state at `now` (the shared breaker's
    /// counters zero: `Breaker::stats` fills them).
    pub(crate) fn stats(&self, now: Instant) -> BreakerStats {
        let totals = self.window.totals(now);
        BreakerStats {
            state: self.state(now),
            mode: self.mode,
            calls: totals.calls,
            failures: totals.failures,
            timed_calls: totals.timed,
            slow_calls: totals.slow,
            failure_rate: totals.failure_rate(),
            slow_call_rate: totals.slow_call_rate(),
            consecutive_failures: self.consecutive,
            reopened: self.reopened,
            trips: 0,
            transitions: TransitionCounts::default(),
            rejected: 0,
        }
    }

    /// The transition epoch; changes on every transition.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether calls are admitted without asking: closed in normal mode,
    /// or disabled, or metrics only.
    pub(crate) fn admits_freely(&self) -> bool {
        match self.mode {
            Mode::Normal => matches!(self.state, State::Closed),
            Mode::ForcedOpen => false,
            Mode::Disabled | Mode::MetricsOnly => true,
        }
    }

    /// Whether recording one more success that is not slow would change
    /// nothing: admitting freely, with a count window full of successes
    /// that are not slow (the call pushed out is one too) — or disabled.
    pub(crate) fn saturated(&self) -> bool {
        match self.mode {
            Mode::Disabled => true,
            Mode::ForcedOpen => false,
            Mode::Normal | Mode::MetricsOnly => self.admits_freely() && self.window.saturated(),
        }
    }

    /// Whether the breaker is half-open with every probe permit out: no
    /// call is admitted until one comes back (or the round expires).
    pub(crate) fn probes_out(&self) -> bool {
        self.mode == Mode::Normal
            && matches!(self.state, State::HalfOpen { issued, .. } if issued >= self.policy.half_open_permits)
    }

    /// When an open breaker lets probes through; `None` when not open, and
    /// when forced open (only a change of [`mode`](CircuitState::mode)
    /// admits then).
    pub(crate) fn open_until(&self) -> Option<Instant> {
        match self.state {
            State::Open { until } if self.mode == Mode::Normal => Some(until),
            _ => None,
        }
    }

    /// When the current half-open round expires; `None` when not
    /// half-open.
    pub(crate) fn half_open_deadline(&self) -> Option<Instant> {
        match self.state {
            State::HalfOpen { since, .. } if self.mode == Mode::Normal => {
                Some(self.round_deadline(since))
            }
            _ => None,
        }
    }

    /// Asks to let one call through at `now`: its ticket and the
    /// transition the asking caused (an open breaker whose time is up goes
    /// half-open).
    ///
    /// # Errors
    ///
    /// [`Refused`] when the call must fail fast: open, forced open, or
    /// half-open with every probe permit out.
    pub(crate) fn try_acquire(
        &mut self,
        now: Instant,
    ) -> Result<(Ticket, Option<Transition>), Refused> {
        let refused = |retry_after, transition| Refused {
            retry_after,
            transition,
        };
        match self.mode {
            Mode::Normal => {}
            Mode::ForcedOpen => return Err(refused(self.policy.max_open_duration, None)),
            Mode::Disabled | Mode::MetricsOnly => return Ok((Ticket { epoch: self.epoch }, None)),
        }
        let mut transition = None;
        if let State::HalfOpen { since, .. } = self.state {
            if self.round_expired(since, now) {
                transition = Some(self.open(now, Reason::HalfOpenTimeout));
            }
        }
        if let State::Open { until } = self.state {
            if now < until {
                return Err(refused(until - now, transition));
            }
            transition = Some(self.enter(
                State::HalfOpen {
                    since: now,
                    issued: 0,
                    successes: 0,
                    failures: 0,
                    slow: 0,
                },
                Reason::OpenElapsed,
            ));
        }
        let permits = self.policy.half_open_permits;
        match &mut self.state {
            State::Closed => {}
            State::HalfOpen { issued, .. } if *issued < permits => *issued += 1,
            State::HalfOpen { .. } => {
                let deadline = self.half_open_deadline().unwrap_or(now);
                return Err(refused(deadline.saturating_duration_since(now), transition));
            }
            State::Open { .. } => return Err(refused(Duration::ZERO, transition)),
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
    /// `elapsed`: how long it took, if timed; a call without (a cold load,
    /// or one the caller did not time) is never slow.
    pub(crate) fn record(
        &mut self,
        ticket: Ticket,
        outcome: Outcome,
        elapsed: Option<Duration>,
        now: Instant,
    ) -> Option<Transition> {
        if ticket.epoch != self.epoch || self.mode == Mode::Disabled {
            return None;
        }
        let failed = match outcome {
            Outcome::Success => false,
            Outcome::Failure | Outcome::Overload => true,
            Outcome::Ignored => {
                self.release(ticket);
                return None;
            }
        };
        let slow = elapsed.is_some_and(|e| e >= self.policy.slow_call_duration);
        let entry = Entry {
            failed,
            timed: elapsed.is_some(),
            slow,
        };
        if let State::HalfOpen { since, .. } = self.state {
            if self.round_expired(since, now) {
                return Some(self.open(now, Reason::HalfOpenTimeout));
            }
        }
        match &mut self.state {
            State::Closed => {
                self.window.push(entry, now);
                match outcome {
                    Outcome::Failure => self.consecutive = self.consecutive.saturating_add(1),
                    Outcome::Success => self.consecutive = 0,
                    _ => {}
                }
                if self.mode != Mode::Normal {
                    return None;
                }
                let reason = self.trip_reason(now)?;
                Some(self.open(now, reason))
            }
            State::HalfOpen {
                successes,
                failures,
                slow: slow_probes,
                ..
            } => {
                *slow_probes += u32::from(slow);
                if failed {
                    *failures += 1;
                } else {
                    *successes += 1;
                }
                let permits = f64::from(self.policy.half_open_permits);
                let (failures, slow, done) = (
                    f64::from(*failures) / permits,
                    f64::from(*slow_probes) / permits,
                    *successes + *failures >= self.policy.half_open_permits,
                );
                if failures >= self.policy.failure_rate_threshold
                    || slow >= self.policy.slow_call_rate_threshold
                {
                    Some(self.open(now, Reason::ProbesFailed))
                } else if done {
                    Some(self.close(Reason::ProbesSucceeded))
                } else {
                    None
                }
            }
            State::Open { .. } => None,
        }
    }

    /// Gives back an admitted call that ended without an outcome: nothing
    /// is counted, a half-open permit is freed.
    pub(crate) fn release(&mut self, ticket: Ticket) {
        if ticket.epoch != self.epoch {
            return;
        }
        if let State::HalfOpen { issued, .. } = &mut self.state {
            *issued = issued.saturating_sub(1);
        }
    }

    /// Sets the mode at `now`. Every mode starts from a fresh state:
    /// forced open is open, the others closed with an empty window and
    /// the backoff reset.
    pub(crate) fn set_mode(&mut self, mode: Mode, now: Instant) -> Option<Transition> {
        let from = self.state(now);
        self.mode = mode;
        self.window.clear();
        self.consecutive = 0;
        self.reopened = 0;
        self.state = State::Closed;
        self.epoch += 1;
        let to = self.state(now);
        (from != to).then_some(Transition::new(from, to, Reason::Manual))
    }

    fn round_expired(&self, since: Instant, now: Instant) -> bool {
        now.saturating_duration_since(since) >= self.policy.half_open_max_wait
    }

    /// When a half-open round begun at `since` runs out of time; near the
    /// end of time, then (as `open` does), rather than an overflow.
    fn round_deadline(&self, since: Instant) -> Instant {
        since
            .checked_add(self.policy.half_open_max_wait)
            .unwrap_or(since)
    }

    /// The reason the closed window trips now, if it does.
    fn trip_reason(&self, now: Instant) -> Option<Reason> {
        let p = &self.policy;
        if p.consecutive_failures
            .is_some_and(|n| self.consecutive >= n)
        {
            return Some(Reason::ConsecutiveFailures);
        }
        let totals = self.window.totals(now);
        if totals.calls < p.minimum_calls as u64 {
            return None;
        }
        if totals.failure_rate() >= p.failure_rate_threshold {
            Some(Reason::FailureRate)
        } else if totals.slow_call_rate_over(p.minimum_calls) >= p.slow_call_rate_threshold {
            Some(Reason::SlowCallRate)
        } else {
            None
        }
    }

    fn open(&mut self, now: Instant, reason: Reason) -> Transition {
        match self.state {
            // A round that ran out of time without its probes reporting
            // proved nothing (its probes may still be streaming, or a
            // backpressure reservation was never called): the same wait
            // again, no doubling.
            State::HalfOpen { .. } if reason == Reason::HalfOpenTimeout => {}
            State::HalfOpen { .. } => self.reopened = self.reopened.saturating_add(1),
            _ => self.reopened = 0,
        }
        let ceiling = self.policy.open_ceiling(self.reopened);
        let duration = if self.policy.jitter {
            // "Equal jitter" (AWS Architecture Blog, "Exponential Backoff
            // And Jitter", 2015): half the ceiling, plus a uniform draw
            // over the other half, so in [ceiling / 2, ceiling]. Full
            // jitter's (0, ceiling] opened a 5 s breaker for 322 ms. Never
            // zero: a breaker opened at `now` is open at `now` (a zero wait
            // let the admission that timed a half-open round out go
            // half-open again at once, and report that instead of the
            // reopening, lost to the hook and trips).
            let ns = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
            let half = ns / 2;
            let rest = (ns - half).max(1);
            Duration::from_nanos(half + 1 + self.next_random() % rest)
        } else {
            ceiling
        };
        // A `now` near the end of time opens until then, not past it.
        let until = now.checked_add(duration).unwrap_or(now);
        self.enter(State::Open { until }, reason)
    }

    fn close(&mut self, reason: Reason) -> Transition {
        self.window.clear();
        self.consecutive = 0;
        self.reopened = 0;
        self.enter(State::Closed, reason)
    }

    fn enter(&mut self, state: State, reason: Reason) -> Transition {
        let from = kind(&self.state);
        self.state = state;
        self.epoch += 1;
        Transition::new(from, kind(&self.state), reason)
    }

    /// SplitMix64.
    fn next_random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

fn kind(state: &State) -> BreakerState {
    match state {
        State::Closed => BreakerState::Closed,
        State::Open { .. } => BreakerState::Open,
        State::HalfOpen { .. } => BreakerState::HalfOpen,
    }
}

#[cfg(test)]
mod tests;
