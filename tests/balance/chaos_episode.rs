//! One fault of the chaos suite, judged: how fast its backend was out
//! (`OUT_REQUESTS`, `OUT_TIME`) and back (`Bound`, with health's
//! readmission bound when health ejected it), and the line printed for it.

use std::time::Duration;

use tokio::time::Instant;
use tower_model_balance::breaker::BreakerState;
use tower_model_balance::health::{HealthConfig, HealthStatus};

use crate::chaos_stack::PROBE_ROUND;

/// A fault must take its backend out within this many requests to it...
///
/// Counted: every request its endpoint was given (first attempts,
/// retries, updates, the half-open probes), but for a hedge's backup
/// dropped unanswered because its first attempt, on another backend,
/// answered first: a race the backup lost. Such a backup carries no
/// caller's result, and it ran less than the hedge delay (1-61 ms
/// measured), so it says nothing of the backend to its breaker either
/// (the balancer records it as cancelled). They come in bursts when a
/// stall of the machine makes many first attempts overrun the delay at
/// once: one run gave the hung backend 12 first attempts, 1 update and 19
/// such backups (135 hedges in 0.22 s, 3 won, the budget far from spent).
/// A backup that failed or was still running there counts.
pub const OUT_REQUESTS: u64 = 20;
/// ...and this long.
pub const OUT_TIME: Duration = Duration::from_secs(2);
/// How long the timeline waits for an event before it records a miss
/// (asserted at the end, with every figure printed).
pub const GIVE_UP: Duration = Duration::from_secs(15);
/// How long it waits for a healed backend to be back: past health's
/// outlier ejection (a silence: a hung backend sent requests that none
/// answered), 30 s the first time, twice that the second in a row.
pub const BACK_GIVE_UP: Duration = Duration::from_secs(75);
/// Health's base outlier ejection time (`outlier_ejection`, the default).
const OUTLIER_EJECTION: Duration = Duration::from_secs(30);

/// One fault, from injection to its backend's return.
pub struct Episode {
    pub backend: usize,
    pub fault: &'static str,
    /// Requests sent to the backend, and the time, until it was out.
    pub out: Option<(u64, Duration)>,
    /// Time from healing until it was back, and the bound asserted (see
    /// `Episode::back_limit`).
    pub back: Option<Duration>,
    pub bound: Bound,
    /// When it was faulted and healed.
    pub faulted_at: Instant,
    pub healed_at: Instant,
    /// At healing: its breaker's state and reopenings, whether ejected.
    pub at_heal: (BreakerState, u32, bool),
    /// Its health when it was back, or when the timeline gave up.
    pub health: Option<HealthStatus>,
    /// How it was found: the requests it was given until out, by how they
    /// reached it and ended, and the hedging's state.
    pub figures: String,
}

impl Episode {
    pub fn ok(&self) -> bool {
        let out = self
            .out
            .is_some_and(|(n, t)| n <= OUT_REQUESTS && t <= OUT_TIME);
        out && self.back.is_some_and(|t| t <= self.back_limit())
    }

    pub fn back_limit(&self) -> Duration {
        self.bound
            .breaker
            .max(self.bound.health.unwrap_or_default())
    }

    pub fn line(&self) -> String {
        let out = match self.out {
            Some((n, t)) => format!("out after {n} requests, {:.3} s", t.as_secs_f64()),
            None => format!("not out within {} s", GIVE_UP.as_secs()),
        };
        let back = match self.back {
            Some(t) => format!(
                "back {:.3} s after healing (≤ {:.3} s{})",
                t.as_secs_f64(),
                self.bound.breaker.as_secs_f64(),
                match self.bound.health {
                    Some(h) => format!(", ejected by health: ≤ {:.3} s", h.as_secs_f64()),
                    None => String::new(),
                }
            ),
            None => format!(
                "not back within {} s, health {:?}",
                BACK_GIVE_UP.as_secs(),
                self.health
            ),
        };
        let (state, reopened, ejected) = self.at_heal;
        format!(
            "chaos: node-{} {}: {out} (≤ {OUT_REQUESTS}, ≤ {} s); {back}; \
             healed {state:?}, reopened {reopened}, ejected {ejected}{}",
            self.backend,
            self.fault,
            OUT_TIME.as_secs(),
            match (self.ok(), self.back.is_some_and(|t| t > self.bound.breaker)) {
                (false, _) => "  <-- FAILED",
                (true, true) => "  <-- over the breaker's bound, within health's",
                (true, false) => "",
            },
        )
    }
}

/// How long after healing a backend may take to be back.
///
/// `breaker`, the bound: the open duration in force (the
/// backoff's ceiling, from healing or from a reopening after it: a
/// half-open probe sent before healing may fail after it) plus a probe
/// round — the longer of an active probe round and a half-open round,
/// whose probes answer or time out within the timeout.
///
/// `health`, when health ejected the backend at healing or after: then
/// its return is health's decision, and the breaker's bound cannot hold.
/// Health is evaluated once an interval (1 s) on the outcomes since the
/// last evaluation, so the first evaluation after healing may still eject
/// it for the fault's failures (measured 13 to 907 ms after healing); an
/// ejected backend gets no traffic, so its breaker is not probed; and it
/// is readmitted only at an evaluation that finds its score over
/// `readmit_above`, which the active probes' successes alone bring back
/// (measured 2.0 or 3.0 s after the ejection; returns of 2.80 s against a
/// breaker's bound of 2.0 s, 3.40 s against 3.0 s). The bound is then the
/// last ejection seen plus `readmission` plus a probe round as above. An
/// outlier ejection (a hung backend's silence: requests sent, none
/// answered) is timed instead, as Envoy's: the bound is the last ejection
/// plus [`outlier_readmission`] plus a probe round.
pub struct Bound {
    pub breaker: Duration,
    pub health: Option<Duration>,
}

/// The longest an ejected, healed backend waits to be readmitted:
/// evaluations until its ejection score, `(1 − error rate) × (w_latency ×
/// latency + w_capacity + w_connection)` (capacity and connection judged
/// at 1), is over `readmit_above`, from the worst start — an error rate of
/// 1 and a latency term of 0 (its recent p99 all failure penalties). With
/// no traffic, only the probes' successes lower the error rate, each by
/// the factor `1 − error_alpha`, one a probe round; one probe may slip
/// past an evaluation (a stall). Defaults: the error rate must fall below
/// 1 − 0.35 / 0.5 = 0.3, which takes 6 successes (0.8^6 = 0.26), 7 probe
/// rounds with the slip: 4 evaluations, 4 s.
/// The settings are spelled out here and checked against `health`.
pub fn readmission(health: &HealthConfig) -> Duration {
    const WEIGHTS: [f64; 3] = [0.5, 0.33, 0.17];
    const INTERVAL: Duration = Duration::from_secs(1);
    const ERROR_ALPHA: f64 = 0.2;
    const THRESHOLDS: (f64, f64) = (0.2, 0.35);
    let [latency, capacity, connection] = WEIGHTS;
    let (eject_below, readmit_above) = THRESHOLDS;
    let spelled = HealthConfig::builder()
        .weights(latency, capacity, connection)
        .interval(INTERVAL)
        .error_alpha(ERROR_ALPHA)
        .thresholds(eject_below, readmit_above)
        .build()
        .expect("valid health settings");
    assert_eq!(health, &spelled, "the bound reads the policy's settings");
    let below = 1.0 - readmit_above / (capacity + connection);
    let successes = (below.ln() / (1.0 - ERROR_ALPHA).ln()).floor() as u32 + 1;
    let per_evaluation = (INTERVAL.as_nanos() / PROBE_ROUND.as_nanos()).max(1) as u32;
    INTERVAL * (successes + 1).div_ceil(per_evaluation)
}

/// The longest an outlier-ejected backend stays out: the base ejection
/// time times its consecutive outlier ejections (at most `ejections`, the
/// backend's ejections so far, and at most 10), plus an evaluation
/// interval (it is readmitted at the first evaluation after).
pub fn outlier_readmission(ejections: u64) -> Duration {
    const INTERVAL: Duration = Duration::from_secs(1);
    OUTLIER_EJECTION * u32::try_from(ejections.clamp(1, 10)).unwrap_or(10) + INTERVAL
}
