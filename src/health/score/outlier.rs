//! The latency-outlier rule: like compared with like.
//!
//! A latency outlier is a backend that serves *the same work* several
//! times slower than its peers do, for long enough. The time to a first
//! token grows with the prompt and with the requests a server already
//! has in flight (they queue, or share its batches), and affinity puts
//! more of them on one server than on another; neither is sickness. So:
//!
//! * latency is **normalised by the work in flight**: each interval's p99
//!   over the backend's mean requests in flight then (at least 1), the
//!   latency *per concurrent request* — a server with 3× the load and 3×
//!   the time to first token is as fast as its peer;
//! * it is compared with its **peers'** at the same time (the median of
//!   the other eligible backends with answers in the last 3 intervals), so
//!   that prompts growing fleet-wide (a chat's history) move the bar with
//!   them; with no such peer there is no comparison and no outlier
//!   (a lone backend's slowness only lowers its score);
//! * the bar is relative **and** absolute: over `outlier_factor` (3) ×
//!   its peers' median with 3 peers or more — one more (4×) with one or
//!   two, where the median is just them — and 50 ms per request over it;
//!   and over `outlier_factor` × its own normalised baseline (it *turned*
//!   slow: a slower GPU class is steered by cost, not ejected);
//! * for 5 intervals with answers in a row (5 answers at least), none of
//!   them failing.
//!
//! A backend that **answers nothing** (stopped, SIGSTOPped, a dead
//! connection the caller times out on) has no latency to compare, but its
//! latency is at least the time it has been silent: requests in flight at
//! both ends of an interval, or sent in it (each dropped when a hedge's
//! backup answered first), and no answer (head or outcome) in it. Once
//! it has been silent longer than `outlier_factor` × its own recent p99
//! and the failure penalty, each such interval counts as slow, while a
//! peer answers (a fleet silent as a whole is not one sick backend):
//! ejected within the failure penalty (or that factor of its p99) plus 5
//! intervals — at once, past 3 times that bar, once 5 requests sent to it
//! since its last answer went unanswered (Envoy's consecutive gateway failures
//! are the same count: a healthy backend behind a hedge at its p95 loses
//! five races in a row at most 0.05⁵ ≈ 3·10⁻⁷ of the time, while a stopped
//! one behind that hedge has nothing left in flight to be silent under). A backend that
//! answers with failures is the error rate's.

use std::time::Duration;

use super::state::{HealthState, Observation};
use crate::health::config::HealthConfig;

/// Consecutive intervals with answers (or silent) a backend must be slow
/// in before it is ejected as a latency outlier: a passing queue (behind
/// a cold load, say) is not an outlier.
pub(super) const OUTLIER_INTERVALS: u32 = 5;
/// Requests sent since its last answer, all unanswered, past which a
/// backend silent [`SILENT_BARS`] times its bar is ejected without waiting
/// for [`OUTLIER_INTERVALS`] (Envoy's `consecutive_gateway_failure`
/// default).
pub(super) const SILENT_REQUESTS: u64 = 5;
/// How many times its bar a backend must be silent, with
/// [`SILENT_REQUESTS`] unanswered, to be ejected at once (3 s at the
/// defaults): a real vLLM answers nothing for a second or two while it
/// compiles a batch shape it has not seen (past one bar, 1 s, a healthy
/// server was ejected in 2 of 9 runs of the real-vLLM suite).
pub(super) const SILENT_BARS: u32 = 3;
/// Added to `outlier_factor` against fewer than [`MIN_PEERS`] peers,
/// whose median is just them (with two backends, the other one).
const THIN_PEERS_EXTRA: f64 = 1.0;
/// Peers for the bar of `outlier_factor` alone.
const MIN_PEERS: usize = 3;
/// How far over its peers' median a latency outlier must be in absolute
/// terms, ms per request in flight: no outlier of 2 ms against 0.5 ms.
const MIN_GAP_MS: f64 = 50.0;
/// A peer is compared with while it had answers this many intervals ago
/// at most.
const FRESH_INTERVALS: u32 = 3;
/// Error rate at or above which a backend counts as failing, not slow:
/// an outlier is a backend slow while not failing.
pub(super) const FAILING: f64 = 0.5;

/// The peers of each backend: the normalised latencies of the fleet's
/// eligible backends with fresh answers, sorted, so that the median of
/// the others is found for each backend in constant time.
pub(super) struct Peers {
    sorted: Vec<f64>,
    /// Where each backend's own value is in `sorted`, if it is there.
    at: Vec<Option<usize>>,
}

impl Peers {
    pub(super) fn new(p: &HealthConfig, fleet: &[(&mut HealthState, Observation)]) -> Self {
        let fresh = p.interval.saturating_mul(FRESH_INTERVALS);
        let mut values: Vec<(f64, usize)> = fleet
            .iter()
            .enumerate()
            .filter(|(_, (s, _))| s.ejected.is_none())
            .filter(|(_, (s, _))| s.since_answers.is_some_and(|t| t <= fresh))
            .filter_map(|(i, (s, _))| Some((s.norm_ms?, i)))
            .collect();
        values.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut at = vec![None; fleet.len()];
        for (j, (_, i)) in values.iter().enumerate() {
            at[*i] = Some(j);
        }
        Self {
            sorted: values.into_iter().map(|(v, _)| v).collect(),
            at,
        }
    }

    /// The median normalised latency of the peers of backend `i` (the
    /// upper one of an even count) and how many they are; `None` without
    /// any.
    pub(super) fn of(&self, i: usize) -> Option<(f64, usize)> {
        let own = self.at.get(i).copied().flatten();
        let n = self.sorted.len() - usize::from(own.is_some());
        let m = n / 2;
        let index = match own {
            Some(j) if j <= m => m + 1,
            _ => m,
        };
        (n > 0).then(|| (self.sorted[index], n))
    }
}

impl HealthState {
    /// Whether the interval just folded in counts toward the outlier
    /// verdict: it had answers, or it was silent with requests in flight
    /// or sent. An interval with nothing sent is skipped, not a reset: the
    /// balancer sends a failing backend less, not nothing.
    pub(super) fn counts(&self, obs: &Observation) -> bool {
        obs.timed > 0 || (self.busy && self.silent_for > Duration::ZERO)
    }

    /// Counts the interval of `dt` toward (or clears) a latency-outlier
    /// verdict, `peers` the median normalised latency of its peers and how
    /// many they are. Returns whether it is silent past its bar with
    /// [`SILENT_REQUESTS`] unanswered: an outlier at once.
    pub(super) fn judge_slowness(
        &mut self,
        p: &HealthConfig,
        obs: &Observation,
        peers: Option<(f64, usize)>,
        dt: Duration,
    ) -> bool {
        let slow = self.is_outlier(p, obs, peers);
        let silenced = slow
            && self.unanswered >= SILENT_REQUESTS
            && p.outlier_factor.is_some_and(|factor| {
                self.silent_for.as_secs_f64() * 1_000.0
                    > f64::from(SILENT_BARS) * self.silence_bar_ms(p, factor)
            });
        if self.counts(obs) {
            self.slow_intervals = if slow {
                self.slow_intervals.saturating_add(1)
            } else {
                0
            };
        }
        if self.ejected.is_none() && !slow {
            // Consecutive ejections end once it served well for as long as
            // a first ejection lasts.
            self.healthy_for = self.healthy_for.saturating_add(dt);
            if self.healthy_for >= p.outlier_ejection {
                self.streak = 0;
            }
        } else {
            self.healthy_for = Duration::ZERO;
        }
        silenced
    }

    /// Whether the interval just folded in was slow: see the module docs.
    pub(super) fn is_outlier(
        &self,
        p: &HealthConfig,
        obs: &Observation,
        peers: Option<(f64, usize)>,
    ) -> bool {
        let (Some(factor), Some((median, n))) = (p.outlier_factor, peers) else {
            return false;
        };
        if self.silent_for > Duration::ZERO {
            return self.silent_for.as_secs_f64() * 1_000.0 > self.silence_bar_ms(p, factor);
        }
        let (Some(base), Some(recent), Some(sample)) =
            (self.norm_base_ms, self.norm_ms, self.norm_sample(obs))
        else {
            return false;
        };
        let peer_factor = if n >= MIN_PEERS {
            factor
        } else {
            factor + THIN_PEERS_EXTRA
        };
        self.error_rate < FAILING
            && obs.failures == 0
            && sample > factor * base
            && recent > factor * base
            && recent > peer_factor * median
            && recent - median >= MIN_GAP_MS
    }

    /// How long a backend may be silent before each silent interval counts
    /// as slow, ms: `factor` × its recent p99, and the failure penalty at
    /// least.
    fn silence_bar_ms(&self, p: &HealthConfig, factor: f64) -> f64 {
        let own = self.p99_ms.unwrap_or(0.0) * factor;
        own.max(p.failure_penalty.as_secs_f64() * 1_000.0)
    }

    /// The interval's p99 over its mean requests in flight (at least 1):
    /// ms per concurrent request.
    pub(super) fn norm_sample(&self, obs: &Observation) -> Option<f64> {
        obs.p99_ms.map(|p99| p99 / self.concurrency)
    }
}

#[cfg(test)]
mod tests;
