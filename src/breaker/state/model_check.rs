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

use super::machine::CircuitState;
use super::values::{Mode, Ticket};
use crate::classify::Outcome;
use proptest::prelude::*;
use tokio::time::Instant;

mod knobs;
mod reference;

use self::knobs::knobs;
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
            let m = real.stats(now);
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
