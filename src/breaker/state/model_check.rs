//! Moved from `tests/breaker_model.rs` (the state machine is
//! crate-private): `CircuitState` against a reference model of its documented semantics
//! (module docs of `breaker::state`, the policy's field docs, `Outcome`):
//! random policies (count window, no jitter) and random sequences of
//! admissions, outcomes, cancellations, clock steps and mode changes; the
//! two must agree on every admission, every transition and the state read
//! after each step.
//!
//! The model is deliberately plain: the window is a `Vec` of the last calls,
//! rates are recomputed from it on every record.

use std::time::Duration;

use super::{CircuitState, Ticket};
use crate::breaker::{BreakerConfig, Mode};
use crate::classify::Outcome;
use proptest::prelude::*;
use tokio::time::Instant;

/// The knobs the model reads, with the values the test draws.
#[derive(Debug, Clone)]
struct Knobs {
    window: usize,
    minimum_calls: usize,
    failure_rate: f64,
    slow_rate: f64,
    slow_call: Duration,
    consecutive: Option<u32>,
    permits: u32,
    max_wait: Duration,
    open: Duration,
    max_open: Duration,
}

impl Knobs {
    fn policy(&self) -> BreakerConfig {
        let mut b = BreakerConfig::builder()
            .window(self.window)
            .minimum_calls(self.minimum_calls)
            .failure_rate_threshold(self.failure_rate)
            .slow_call_rate_threshold(self.slow_rate)
            .slow_call_duration(self.slow_call)
            .half_open_permits(self.permits)
            .half_open_max_wait(self.max_wait)
            .open_duration(self.open)
            .max_open_duration(self.max_open)
            .jitter(false);
        if let Some(n) = self.consecutive {
            b = b.consecutive_failures(n);
        }
        b.build().unwrap()
    }
}

fn knobs() -> impl Strategy<Value = Knobs> {
    let rate = prop_oneof![Just(0.25), Just(0.5), Just(0.75), Just(1.0), Just(0.3)];
    (
        1usize..8,
        any::<prop::sample::Index>(),
        (rate.clone(), rate),
        proptest::option::of(1u32..5),
        1u32..4,
        (1u64..10, 1u64..4, 1u32..6),
    )
        .prop_map(
            |(window, min, (failure_rate, slow_rate), consecutive, permits, (wait, open, cap))| {
                Knobs {
                    window,
                    minimum_calls: 1 + min.index(window),
                    failure_rate,
                    slow_rate,
                    slow_call: Duration::from_millis(100),
                    consecutive,
                    permits,
                    max_wait: Duration::from_secs(wait),
                    open: Duration::from_secs(open),
                    max_open: Duration::from_secs(open) * cap,
                }
            },
        )
}

mod reference;

use self::reference::{key, Admission, Model, ModelState};

#[derive(Debug, Clone)]
enum Op {
    Acquire,
    Record(prop::sample::Index, u8, Option<u64>),
    Release(prop::sample::Index),
    Advance(u64),
    SetMode(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => Just(Op::Acquire),
        6 => (any::<prop::sample::Index>(), 0u8..4, proptest::option::of(0u64..200))
            .prop_map(|(i, o, e)| Op::Record(i, o, e)),
        2 => any::<prop::sample::Index>().prop_map(Op::Release),
        3 => prop_oneof![0u64..100, 0u64..12_000].prop_map(Op::Advance),
        1 => (0u8..4).prop_map(Op::SetMode),
    ]
}

const OUTCOMES: [Outcome; 4] = [
    Outcome::Success,
    Outcome::Failure,
    Outcome::Overload,
    Outcome::Ignored,
];
const MODES: [Mode; 4] = [
    Mode::Normal,
    Mode::ForcedOpen,
    Mode::Disabled,
    Mode::MetricsOnly,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn circuit_state_agrees_with_the_reference_model(
        k in knobs(),
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        let mut real = CircuitState::with_seed(k.policy(), 1);
        let mut model = Model::new(k);
        let mut now = Instant::now();
        // Calls admitted and not yet ended: the real ticket, the model's.
        let mut out: Vec<(Ticket, u64)> = Vec::new();
        for (step, op) in ops.into_iter().enumerate() {
            match op {
                Op::Acquire => {
                    let got = match real.try_acquire(now) {
                        Ok((ticket, t)) => {
                            out.push((ticket, u64::MAX));
                            Admission::Admitted(t.map(key))
                        }
                        Err(refused) => {
                            Admission::Refused(refused.retry_after, refused.transition.map(key))
                        }
                    };
                    let (want, generation) = model.acquire(now);
                    prop_assert_eq!(got, want, "step {}: admission", step);
                    if let Some(g) = generation {
                        out.last_mut().unwrap().1 = g;
                    }
                }
                Op::Record(i, o, elapsed) if !out.is_empty() => {
                    let (ticket, g) = out.swap_remove(i.index(out.len()));
                    let outcome = OUTCOMES[o as usize];
                    let elapsed = elapsed.map(Duration::from_millis);
                    let got = real.record(ticket, outcome, elapsed, now).map(key);
                    let want = model.record(g, outcome, elapsed, now);
                    prop_assert_eq!(got, want, "step {}: record {:?} {:?}", step, outcome, elapsed);
                }
                Op::Release(i) if !out.is_empty() => {
                    let (ticket, g) = out.swap_remove(i.index(out.len()));
                    real.release(ticket);
                    model.release(g);
                }
                Op::Advance(ms) => now += Duration::from_millis(ms),
                Op::SetMode(m) => {
                    let mode = MODES[m as usize];
                    let got = real.set_mode(mode, now).map(key);
                    let want = model.set_mode(mode, now);
                    prop_assert_eq!(got, want, "step {}: set_mode {:?}", step, mode);
                }
                _ => {}
            }
            prop_assert_eq!(real.state(now), model.read(now), "step {}: state", step);
            let m = real.metrics(now);
            let calls = model.window.len() as u64;
            let failures = model.window.iter().filter(|c| c.failed).count() as u64;
            let timed = model.window.iter().filter(|c| c.timed).count() as u64;
            let slow = model.window.iter().filter(|c| c.slow).count() as u64;
            prop_assert_eq!(
                (m.calls, m.failures, m.timed_calls, m.slow_calls, m.reopened, m.mode),
                (calls, failures, timed, slow, model.reopened, model.mode),
                "step {}: metrics", step
            );
            let until = match model.state {
                ModelState::Open { until } if model.mode == Mode::Normal => Some(until),
                _ => None,
            };
            prop_assert_eq!(real.open_until(), until, "step {}: open until", step);
            if model.state == ModelState::Closed {
                prop_assert_eq!(m.consecutive_failures, model.run, "step {}: run", step);
            }
        }
    }
}
