//! The reference model: the breaker's documented semantics, written
//! plainly (the window a `Vec` of the last calls, rates recomputed on
//! every record).

use std::time::Duration;

use tokio::time::Instant;

use super::knobs::Knobs;
use crate::breaker::state::values::{BreakerState, Mode, Reason, Transition};
use crate::classify::Outcome;

/// One recorded call in the model's window.
#[derive(Debug, Clone, Copy)]
pub(super) struct Call {
    pub(super) failed: bool,
    pub(super) timed: bool,
    pub(super) slow: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum ModelState {
    Closed,
    Open {
        until: Instant,
    },
    HalfOpen {
        since: Instant,
        out: u32,
        ok: u32,
        failed: u32,
        slow: u32,
    },
}

/// The reference model. `generation` plays the epoch: it changes whenever
/// the state does (a transition or a mode set by hand), and a ticket of an
/// earlier generation counts nothing.
#[derive(Debug)]
pub(super) struct Model {
    pub(super) k: Knobs,
    pub(super) mode: Mode,
    pub(super) state: ModelState,
    pub(super) generation: u64,
    pub(super) window: Vec<Call>,
    pub(super) run: u32,
    pub(super) reopened: u32,
}

/// What an admission returned, in comparable form.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Admission {
    Admitted(Option<(BreakerState, BreakerState, Reason)>),
    Refused(Duration, Option<(BreakerState, BreakerState, Reason)>),
}

pub(super) fn key(t: Transition) -> (BreakerState, BreakerState, Reason) {
    (t.from, t.to, t.reason)
}

pub(super) fn kind(s: ModelState) -> BreakerState {
    match s {
        ModelState::Closed => BreakerState::Closed,
        ModelState::Open { .. } => BreakerState::Open,
        ModelState::HalfOpen { .. } => BreakerState::HalfOpen,
    }
}

pub(super) type Change = Option<(BreakerState, BreakerState, Reason)>;

impl Model {
    pub(super) fn new(k: Knobs) -> Self {
        Self {
            k,
            mode: Mode::Normal,
            state: ModelState::Closed,
            generation: 0,
            window: Vec::new(),
            run: 0,
            reopened: 0,
        }
    }

    /// What `state(now)` should read.
    pub(super) fn read(&self, now: Instant) -> BreakerState {
        if self.mode == Mode::ForcedOpen {
            return BreakerState::Open;
        }
        match self.state {
            ModelState::Closed => BreakerState::Closed,
            ModelState::Open { until } if now >= until => BreakerState::HalfOpen,
            ModelState::Open { .. } => BreakerState::Open,
            ModelState::HalfOpen { since, .. } if now >= since + self.k.max_wait => {
                BreakerState::Open
            }
            ModelState::HalfOpen { .. } => BreakerState::HalfOpen,
        }
    }

    pub(super) fn go(&mut self, to: ModelState, reason: Reason) -> Change {
        let from = kind(self.state);
        self.state = to;
        self.generation += 1;
        Some((from, kind(to), reason))
    }

    /// Opens: the n-th reopening in a row (from half-open, on probes that
    /// reported) waits `open × 2^n`, at most `max_open`; from closed, `n`
    /// is 0; a round that timed out keeps `n`.
    pub(super) fn open(&mut self, now: Instant, reason: Reason) -> Change {
        if matches!(self.state, ModelState::HalfOpen { .. }) {
            if reason != Reason::HalfOpenTimeout {
                self.reopened += 1;
            }
        } else {
            self.reopened = 0;
        }
        let mut wait = self.k.open;
        for _ in 0..self.reopened {
            wait = (wait * 2).min(self.k.max_open);
        }
        self.go(ModelState::Open { until: now + wait }, reason)
    }

    pub(super) fn close(&mut self, reason: Reason) -> Change {
        self.window.clear();
        self.run = 0;
        self.reopened = 0;
        self.go(ModelState::Closed, reason)
    }

    pub(super) fn acquire(&mut self, now: Instant) -> (Admission, Option<u64>) {
        match self.mode {
            Mode::ForcedOpen => {
                return (Admission::Refused(self.k.max_open, None), None);
            }
            Mode::Disabled | Mode::MetricsOnly => {
                return (Admission::Admitted(None), Some(self.generation));
            }
            _ => {}
        }
        let mut change = None;
        if let ModelState::HalfOpen { since, .. } = self.state {
            if now >= since + self.k.max_wait {
                change = self.open(now, Reason::HalfOpenTimeout);
            }
        }
        if let ModelState::Open { until } = self.state {
            if now < until {
                return (Admission::Refused(until - now, change), None);
            }
            let probing = ModelState::HalfOpen {
                since: now,
                out: 0,
                ok: 0,
                failed: 0,
                slow: 0,
            };
            change = self.go(probing, Reason::OpenElapsed);
        }
        let permits = self.k.permits;
        let max_wait = self.k.max_wait;
        match &mut self.state {
            ModelState::HalfOpen { out, since, .. } => {
                if *out == permits {
                    let rest = (*since + max_wait) - now;
                    return (Admission::Refused(rest, change), None);
                }
                *out += 1;
            }
            ModelState::Closed => {}
            ModelState::Open { .. } => unreachable!("left above"),
        }
        (Admission::Admitted(change), Some(self.generation))
    }

    pub(super) fn release(&mut self, generation: u64) {
        if generation != self.generation {
            return;
        }
        if let ModelState::HalfOpen { out, .. } = &mut self.state {
            *out -= 1;
        }
    }

    pub(super) fn record(
        &mut self,
        generation: u64,
        outcome: Outcome,
        elapsed: Option<Duration>,
        now: Instant,
    ) -> Change {
        if generation != self.generation || self.mode == Mode::Disabled {
            return None;
        }
        if outcome == Outcome::Ignored {
            self.release(generation);
            return None;
        }
        let failed = matches!(outcome, Outcome::Failure | Outcome::Overload);
        let call = Call {
            failed,
            timed: elapsed.is_some(),
            slow: elapsed.is_some_and(|e| e >= self.k.slow_call),
        };
        match self.state {
            ModelState::Closed => {
                self.window.push(call);
                if self.window.len() > self.k.window {
                    self.window.remove(0);
                }
                match outcome {
                    Outcome::Failure => self.run += 1,
                    Outcome::Success => self.run = 0,
                    _ => {}
                }
                if self.mode == Mode::MetricsOnly {
                    return None;
                }
                let reason = self.trip_reason()?;
                self.open(now, reason)
            }
            ModelState::HalfOpen { since, .. } if now >= since + self.k.max_wait => {
                self.open(now, Reason::HalfOpenTimeout)
            }
            ModelState::HalfOpen {
                ok,
                failed: bad,
                slow,
                ..
            } => {
                let (ok, bad, slow) = (
                    ok + u32::from(!failed),
                    bad + u32::from(failed),
                    slow + u32::from(call.slow),
                );
                if let ModelState::HalfOpen {
                    ok: o,
                    failed: f,
                    slow: s,
                    ..
                } = &mut self.state
                {
                    (*o, *f, *s) = (ok, bad, slow);
                }
                let permits = f64::from(self.k.permits);
                if f64::from(bad) / permits >= self.k.failure_rate
                    || f64::from(slow) / permits >= self.k.slow_rate
                {
                    self.open(now, Reason::ProbesFailed)
                } else if ok + bad == self.k.permits {
                    self.close(Reason::ProbesSucceeded)
                } else {
                    None
                }
            }
            ModelState::Open { .. } => unreachable!("no ticket of an open generation"),
        }
    }

    pub(super) fn trip_reason(&self) -> Option<Reason> {
        if self.k.consecutive.is_some_and(|n| self.run >= n) {
            return Some(Reason::ConsecutiveFailures);
        }
        let calls = self.window.len();
        if calls < self.k.minimum_calls {
            return None;
        }
        let failures = self.window.iter().filter(|c| c.failed).count();
        let timed = self.window.iter().filter(|c| c.timed).count();
        let slow = self.window.iter().filter(|c| c.slow).count();
        if failures as f64 / calls as f64 >= self.k.failure_rate {
            Some(Reason::FailureRate)
        } else if timed >= self.k.minimum_calls && slow as f64 / timed as f64 >= self.k.slow_rate {
            Some(Reason::SlowCallRate)
        } else {
            None
        }
    }

    pub(super) fn set_mode(&mut self, mode: Mode, now: Instant) -> Change {
        let from = self.read(now);
        self.mode = mode;
        self.state = ModelState::Closed;
        self.window.clear();
        self.run = 0;
        self.reopened = 0;
        self.generation += 1;
        let to = self.read(now);
        (from != to).then_some((from, to, Reason::Manual))
    }
}
