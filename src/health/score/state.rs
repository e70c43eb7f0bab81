//! The health of one backend: [`HealthState`], updated from what an
//! interval [`Observation`] saw, and its public view ([`HealthStatus`]).

use std::time::Duration;

use crate::health::config::HealthConfig;
use crate::health::signals::{capacity, LoadSignals};

/// Weight of the recent p99 in the baseline when above it, each interval
/// with data (the baseline follows it up slowly, down at once).
const BASELINE_UP: f64 = 0.01;
/// Consecutive outlier ejections past which the ejection time stops
/// growing.
const MAX_OUTLIER_STREAK: u32 = 10;

/// What one evaluation interval saw of a backend.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Observation {
    /// Outcomes: requests finished and probes answered.
    pub(crate) calls: u64,
    /// Failures among them (a probe that failed or answered not ready).
    pub(crate) failures: u64,
    /// Timed requests (failures included, at the penalty).
    pub(crate) timed: u64,
    /// Signs of life from requests: response heads and successes (probes
    /// and failures without a head, such as timeouts, not counted). None with requests in flight at both ends of the
    /// interval, or sent in it: silent. Only whether it is 0 counts (the
    /// balancer gives 1 when any came).
    pub(crate) answered: u64,
    /// Requests sent to the backend in the interval: with none answered,
    /// it is silent even when none is in flight at the interval's end (a
    /// hedge's backup answered each, and the attempt there was dropped).
    pub(crate) sent: u64,
    /// Their 99th percentile latency, ms.
    pub(crate) p99_ms: Option<f64>,
    /// Requests in flight at the end of the interval.
    pub(crate) in_flight: usize,
    /// Load signals from a recent probe.
    pub(crate) load: Option<LoadSignals>,
    /// The backend's GPU memory from its metadata, bytes.
    pub(crate) gpu_memory_bytes: Option<u64>,
}

/// Why a backend is out of the eligible set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ejection {
    /// Its ejection score (the score with the load terms at neutral: the
    /// error rate and the latency against its baseline) fell below the
    /// policy's `eject_below`; it comes back above `readmit_above`.
    Score,
    /// Its latency per request in flight ran over the policy's
    /// `outlier_factor` × its own baseline and several times its peers'
    /// while it was not failing, or it answered nothing with requests in
    /// flight while its peers answered; it comes back after the ejection
    /// time.
    Outlier,
}

/// One backend's health as last evaluated.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct HealthStatus {
    /// The score, in [0, 1].
    pub score: f64,
    /// The score with the load terms (capacity, connection) at neutral, in
    /// [0, 1]: what ejection by score judges.
    pub ejection_score: f64,
    /// The score times the warm-up ramp (while the backend warms up):
    /// P2C divides the backend's cost by the score and its requests in
    /// flight by the ramp.
    pub weight: f64,
    /// Why it is ejected, if it is.
    pub ejected: Option<Ejection>,
    /// Whether it asked to be ejected and the ejection cap
    /// ([`max_ejected_share`](crate::health::HealthConfigBuilder::max_ejected_share)) kept
    /// it in: it still serves, but counts as unhealthy for the balancer's
    /// panic threshold.
    pub held_by_cap: bool,
    /// Smoothed error rate, a fraction in [0, 1].
    pub error_rate: f64,
    /// Smoothed recent p99 latency, ms, once measured.
    pub p99_ms: Option<f64>,
    /// Learned baseline p99 latency, ms, once measured.
    pub baseline_ms: Option<f64>,
    /// The capacity term, in [0, 1].
    pub capacity: f64,
    /// The connection term, in [0, 1].
    pub connection: f64,
}

/// The health of one backend.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HealthState {
    pub(super) error_rate: f64,
    pub(super) p99_ms: Option<f64>,
    pub(super) baseline_ms: Option<f64>,
    pub(super) capacity: f64,
    pub(super) connection: f64,
    pub(super) score: f64,
    /// The score with the load terms at 1.
    pub(super) ejection_score: f64,
    pub(super) ejected: Option<Ejection>,
    /// Asked to be ejected at the last evaluation, kept in by the cap.
    pub(super) held: bool,
    /// Outlier ejection time left.
    pub(super) remaining: Duration,
    /// Consecutive outlier ejections.
    pub(super) streak: u32,
    /// Time since it was last ejected or an outlier.
    pub(super) healthy_for: Duration,
    /// Consecutive intervals with data it was slow in.
    pub(super) slow_intervals: u32,
    /// Smoothed p99 per request in flight, ms.
    pub(super) norm_ms: Option<f64>,
    /// Learned baseline of `norm_ms`, ms.
    pub(super) norm_base_ms: Option<f64>,
    /// Mean requests in flight over the last interval, at least 1.
    pub(super) concurrency: f64,
    /// Requests in flight at the end of the last interval.
    pub(super) in_flight: usize,
    /// How long it had requests in flight or sent and answered none
    /// (idle intervals neither add to it nor end it).
    pub(super) silent_for: Duration,
    /// Whether the last interval had requests in flight or sent.
    pub(super) busy: bool,
    /// Requests sent to it since its last answer.
    pub(super) unanswered: u64,
    /// Time since its last interval with timed answers.
    pub(super) since_answers: Option<Duration>,
    /// Time evaluated since it joined.
    pub(super) age: Duration,
    /// Whether it warms up (it joined a running fleet).
    pub(super) warming: bool,
}

impl HealthState {
    /// A backend with no data: score 1, eligible. `warming`: it joined a
    /// running fleet and starts slowly.
    pub(crate) fn new(warming: bool) -> Self {
        Self {
            error_rate: 0.0,
            p99_ms: None,
            baseline_ms: None,
            capacity: 1.0,
            connection: 1.0,
            score: 1.0,
            ejection_score: 1.0,
            ejected: None,
            held: false,
            remaining: Duration::ZERO,
            streak: 0,
            healthy_for: Duration::ZERO,
            slow_intervals: 0,
            norm_ms: None,
            norm_base_ms: None,
            concurrency: 1.0,
            in_flight: 0,
            silent_for: Duration::ZERO,
            busy: false,
            unanswered: 0,
            since_answers: None,
            age: Duration::ZERO,
            warming,
        }
    }

    pub(crate) fn score(&self) -> f64 {
        self.score
    }

    pub(crate) fn ejected(&self) -> Option<Ejection> {
        self.ejected
    }

    /// Whether it asked to be ejected at the last evaluation and the
    /// ejection cap kept it in.
    pub(crate) fn held(&self) -> bool {
        self.held
    }

    /// The score, times the warm-up ramp from `warm_up_min_weight` to 1
    /// (the public [`HealthStatus::weight`]).
    pub(crate) fn weight(&self, p: &HealthConfig) -> f64 {
        self.score * self.ramp(p)
    }

    /// The warm-up ramp: from `warm_up_min_weight` to 1, linearly over
    /// the policy's `warm_up` of evaluated time (Tokio's clock: the
    /// intervals the health task measures), for a backend that joined a
    /// running fleet; 1 otherwise.
    pub(crate) fn ramp(&self, p: &HealthConfig) -> f64 {
        if !self.warming || p.warm_up.is_zero() || self.age >= p.warm_up {
            return 1.0;
        }
        let progress = self.age.as_secs_f64() / p.warm_up.as_secs_f64();
        p.warm_up_min_weight + (1.0 - p.warm_up_min_weight) * progress
    }

    pub(crate) fn status(&self, p: &HealthConfig) -> HealthStatus {
        HealthStatus {
            score: self.score,
            ejection_score: self.ejection_score,
            weight: self.weight(p),
            ejected: self.ejected,
            held_by_cap: self.held,
            error_rate: self.error_rate,
            p99_ms: self.p99_ms,
            baseline_ms: self.baseline_ms,
            capacity: self.capacity,
            connection: self.connection,
        }
    }

    /// Folds one interval of `dt` into the terms and the score.
    pub(crate) fn update(&mut self, p: &HealthConfig, obs: &Observation, dt: Duration) {
        self.age = self.age.saturating_add(dt);
        let decay = 0.5f64.powf(dt.as_secs_f64() / p.relax_half_life.as_secs_f64());
        // Error rate: one EWMA step per outcome, the interval's as a batch.
        if obs.calls > 0 {
            let keep = (1.0 - p.error_alpha).powf(obs.calls as f64);
            let rate = obs.failures.min(obs.calls) as f64 / obs.calls as f64;
            self.error_rate = self.error_rate * keep + rate * (1.0 - keep);
        } else {
            self.error_rate *= decay;
        }
        // The work in flight over the interval, and silence under it: in
        // flight at both ends, or sent in it, and nothing answered.
        let busy = (self.in_flight > 0 && obs.in_flight > 0) || obs.sent > 0;
        self.concurrency = ((self.in_flight + obs.in_flight) as f64 / 2.0).max(1.0);
        self.in_flight = obs.in_flight;
        self.busy = busy;
        // A timed failure (a timeout) is no answer.
        let silent = obs.answered == 0;
        self.silent_for = match silent {
            true if busy => self.silent_for.saturating_add(dt),
            true => self.silent_for, // sent nothing: no evidence either way
            false => Duration::ZERO,
        };
        self.unanswered = match silent {
            true => self.unanswered.saturating_add(obs.sent),
            false => 0,
        };
        self.since_answers = match obs.timed {
            0 => self.since_answers.map(|t| t.saturating_add(dt)),
            _ => Some(Duration::ZERO),
        };
        // Latency: recent p99 and the baseline it is judged against, raw
        // (the score's term) and per request in flight (the outlier rule).
        let clean = obs.failures == 0;
        let norm = self.norm_sample(obs);
        smooth(p, &mut self.p99_ms, self.baseline_ms, obs.p99_ms, decay);
        smooth(p, &mut self.norm_ms, self.norm_base_ms, norm, decay);
        learn(
            &mut self.baseline_ms,
            self.p99_ms,
            obs.p99_ms.is_some() && clean,
        );
        learn(
            &mut self.norm_base_ms,
            self.norm_ms,
            norm.is_some() && clean,
        );
        self.capacity = match obs.load.and_then(|l| capacity(p, &l, obs.gpu_memory_bytes)) {
            Some(term) => term,
            None => 1.0 - (1.0 - self.capacity) * decay,
        };
        let (full, zero) = p.connections;
        let over = obs.in_flight.saturating_sub(full as usize) as f64;
        self.connection = (1.0 - over / f64::from(zero - full)).clamp(0.0, 1.0);
        let [wl, wc, wn] = p.weights;
        let sum = wl * self.latency_term() + wc * self.capacity + wn * self.connection;
        self.score = ((1.0 - self.error_rate) * sum).clamp(0.0, 1.0);
        let unloaded = wl * self.latency_term() + wc + wn;
        self.ejection_score = ((1.0 - self.error_rate) * unloaded).clamp(0.0, 1.0);
        if self.ejected == Some(Ejection::Outlier) {
            self.remaining = self.remaining.saturating_sub(dt);
        }
    }

    /// `baseline / recent`, at most 1 (1 before any measurement).
    fn latency_term(&self) -> f64 {
        match (self.baseline_ms, self.p99_ms) {
            (Some(base), Some(recent)) if recent > 0.0 => (base / recent).min(1.0),
            _ => 1.0,
        }
    }

    pub(super) fn eject(&mut self, p: &HealthConfig, why: Ejection) {
        self.ejected = Some(why);
        if why == Ejection::Outlier {
            self.streak = (self.streak + 1).min(MAX_OUTLIER_STREAK);
            self.remaining = p.outlier_ejection.saturating_mul(self.streak);
        }
    }

    pub(super) fn readmit(&mut self) {
        if self.ejected == Some(Ejection::Outlier) {
            // Judged afresh on what it serves from now on.
            self.p99_ms = self.baseline_ms;
            self.norm_ms = self.norm_base_ms;
            self.slow_intervals = 0;
            self.silent_for = Duration::ZERO;
            self.unanswered = 0;
        }
        self.ejected = None;
    }
}

/// Folds an interval's `sample` into the smoothed `recent`; with none,
/// relaxes it toward `base` by `decay`.
fn smooth(
    p: &HealthConfig,
    recent: &mut Option<f64>,
    base: Option<f64>,
    sample: Option<f64>,
    decay: f64,
) {
    *recent = match (sample, *recent) {
        (Some(sample), None) => Some(sample),
        (Some(sample), Some(r)) => Some(r + p.latency_alpha * (sample - r)),
        (None, Some(r)) => {
            let base = base.unwrap_or(r);
            Some(base + (r - base) * decay)
        }
        (None, None) => None,
    };
}

/// Learns `base` from `recent` after a clean interval with data: down at
/// once, up slowly (a backend that turns slow does not become its own
/// baseline). A backend failing from the start must not take the failure
/// penalty for its baseline.
fn learn(base: &mut Option<f64>, recent: Option<f64>, clean: bool) {
    if let (Some(recent), true) = (recent, clean) {
        *base = Some(match *base {
            Some(b) if recent > b => b + BASELINE_UP * (recent - b),
            _ => recent,
        });
    }
}
