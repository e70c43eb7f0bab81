//! The health score of one backend, and the fleet's ejections (pure logic:
//! observations and elapsed time in, scores and verdicts out).
//!
//! `score = (1 − error_rate) × (w_l × latency + w_c × capacity + w_n ×
//! connection)`, each term in [0, 1]:
//!
//! * `error_rate`: an EWMA over outcomes (requests and probes), a failure
//!   counting 1;
//! * `latency`: the backend's learned baseline p99 over its recent p99
//!   (at most 1), failures counted at the failure penalty; the baseline
//!   follows the recent p99 down at once and up slowly (1% of the gap an
//!   interval), so a backend that turns slow does not become its own
//!   baseline;
//! * `capacity`: from probed load signals: the lesser of `1 − KV-cache
//!   usage` and `1 / (1 + queue depth / queue_scale)` where the server
//!   reports them, else its free share of GPU memory, else 1;
//! * `connection`: 1 below the policy's `full_below` requests in flight,
//!   falling linearly to 0 at `zero_at`.
//!
//! A **latency outlier** is judged on its latency *per request in flight*
//! against its peers' at the same time, and a backend silent with
//! requests in flight as one whose latency is at least its silence: see
//! [`outlier`]. Each interval must be slow on its own too (none of its
//! calls failed): a backend that failed and healed keeps the failure
//! penalty in its smoothed p99 for a while, and must not be ejected for
//! it once it serves fast again.
//!
//! With no data, every term relaxes toward neutral (error rate 0, latency
//! at baseline, full capacity) with the policy's half-life.
//!
//! Load steers, it does not eject: the score (the weight P2C divides the
//! cost by) has every term, but ejection by score judges the
//! *ejection score*, the same with the capacity and connection terms at 1.
//! A busy backend must keep its models — ejecting it would move its load,
//! and its models' cold loads, onto the others, and they would be next.
//! Ejection is for failing (the error rate) and, through outlier
//! detection, for slowness against the backend's own baseline.

use std::time::Duration;

#[cfg(test)]
use self::outlier::FAILING;
use self::outlier::{Peers, OUTLIER_INTERVALS};
use super::config::HealthConfig;

mod outlier;
mod state;

pub use self::state::{Ejection, HealthStatus};
pub(crate) use self::state::{HealthState, Observation};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Stay,
    Eject(Ejection),
    Readmit,
}

impl HealthState {
    /// What this backend asks for after [`HealthState::update`];
    /// `silenced`: found silent past its bar with enough requests
    /// unanswered ([`HealthState::judge_slowness`]).
    fn verdict(&self, p: &HealthConfig, obs: &Observation, silenced: bool) -> Verdict {
        match self.ejected {
            Some(Ejection::Score) if self.ejection_score > p.readmit_above => Verdict::Readmit,
            Some(Ejection::Outlier) if self.remaining.is_zero() => Verdict::Readmit,
            Some(_) => Verdict::Stay,
            None if self.ejection_score < p.eject_below => Verdict::Eject(Ejection::Score),
            None if silenced => Verdict::Eject(Ejection::Outlier),
            None if self.counts(obs) && self.slow_intervals >= OUTLIER_INTERVALS => {
                Verdict::Eject(Ejection::Outlier)
            }
            None => Verdict::Stay,
        }
    }
}

/// Evaluates every backend of a fleet over one interval of `dt`: updates
/// the scores, readmits the ejected that recovered, then ejects the worst
/// of those that ask, worst first, while fewer than the policy's
/// `max_ejected` are out; those left asking are *held* (in only by the
/// cap).
pub(crate) fn evaluate(
    p: &HealthConfig,
    fleet: &mut [(&mut HealthState, Observation)],
    dt: Duration,
) {
    let mut asking = Vec::new();
    for (state, obs) in fleet.iter_mut() {
        state.update(p, obs, dt);
    }
    let peers = Peers::new(p, fleet);
    for (i, (state, obs)) in fleet.iter_mut().enumerate() {
        state.held = false;
        let silenced = state.judge_slowness(p, obs, peers.of(i), dt);
        match state.verdict(p, obs, silenced) {
            Verdict::Readmit => state.readmit(),
            Verdict::Eject(why) => asking.push((state.ejection_score, i, why)),
            Verdict::Stay => {}
        }
    }
    let out = fleet.iter().filter(|(s, _)| s.ejected.is_some()).count();
    let room = p.max_ejected(fleet.len()).saturating_sub(out);
    asking.sort_by(|a, b| a.0.total_cmp(&b.0));
    for (n, (_, i, why)) in asking.into_iter().enumerate() {
        match n < room {
            true => fleet[i].0.eject(p, why),
            false => fleet[i].0.held = true,
        }
    }
}

#[cfg(test)]
mod tests;
