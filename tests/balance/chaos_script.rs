//! The chaos suite's script: what the timeline and the flapper share (the
//! load, the breakers' transitions, each endpoint's log, the hedging) and
//! one fault's episode, from injection until its backend is back.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tower_model_balance::breaker::BreakerState;
use tower_model_balance::health::Ejection;
use tower_model_balance::hedge::{HedgeHandle, HedgeStats};
use tower_model_balance::route::ModelId;
use tower_model_balance_sim::{Fault, ModelServer};

use crate::chaos_episode::{
    outlier_readmission, readmission, Bound, Episode, BACK_GIVE_UP, GIVE_UP,
};
use crate::chaos_log::{End, Entry, Log, Via};
use crate::chaos_stack::{self, Load, MODELS, PROBE_ROUND, TIMEOUT};

/// What the timeline drives a fault with.
#[derive(Clone, Copy)]
pub enum Action {
    Kill,
    Set(Fault),
}

/// Shared by the timeline and the flapper.
pub struct Script {
    pub load: Arc<Load>,
    pub transitions: chaos_stack::Transitions,
    pub sent_to: Vec<Arc<AtomicU64>>,
    pub logs: Vec<Log>,
    pub hedges: HedgeHandle,
    /// (when, requests the hedge layer counted, extra attempts granted),
    /// after each finished request: the budget's window, read back.
    pub budget: Mutex<Vec<(Instant, u64, u64)>>,
}

/// What the hedging looked like when a fault began.
pub struct HedgeState {
    stats: HedgeStats,
    /// Extra attempts the budget had left (estimated from the samples:
    /// 5% of the requests in the last 10 s, less those granted), and its
    /// allowance.
    budget_left: (i64, u64),
    /// The hedge delays of the backend's models: least, most, and how
    /// many models cannot be hedged.
    delays: (Duration, Duration, usize),
    /// The co-owners of its models out of rotation.
    co_owners_out: Vec<usize>,
}

impl Script {
    pub fn finished(&self) -> u64 {
        *self.load.progress.borrow()
    }

    pub fn out(&self, i: usize) -> bool {
        let b = &self.load.handle.backends()[i];
        b.breaker == BreakerState::Open || b.ejected
    }

    pub fn back(&self, i: usize) -> bool {
        let b = &self.load.handle.backends()[i];
        b.breaker == BreakerState::Closed && !b.ejected
    }

    /// The open duration in force for backend `i` now: the backoff's
    /// ceiling after its breaker's reopenings in a row.
    pub fn open_duration(&self, i: usize) -> Duration {
        let id = &self.load.ids[i];
        let breaker = self.load.handle.breaker(id).expect("a current backend");
        self.ceiling(breaker.stats().reopened)
    }

    /// The backoff's ceiling after `reopened` reopenings in a row.
    pub fn ceiling(&self, reopened: u32) -> Duration {
        let reopened = reopened.min(31);
        let ceiling = chaos_stack::OPEN_DURATION.saturating_mul(1 << reopened);
        ceiling.min(chaos_stack::MAX_OPEN_DURATION)
    }

    /// Samples the budget after each finished request until `done`.
    pub async fn sample_budget(&self, done: &AtomicBool) {
        let mut progress = self.load.progress.subscribe();
        while !done.load(Ordering::Relaxed) && progress.changed().await.is_ok() {
            let sample = (
                Instant::now(),
                self.hedges.stats().requests,
                self.hedges.budget().granted(),
            );
            self.budget
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(sample);
        }
    }

    pub fn hedge_state(&self, i: usize) -> HedgeState {
        let now = Instant::now();
        let stats = self.hedges.stats();
        let granted = self.hedges.budget().granted();
        let window = Duration::from_secs(10);
        let budget_left = {
            let samples = self.budget.lock().unwrap_or_else(|e| e.into_inner());
            let start = samples.partition_point(|s| s.0 + window < now);
            let (_, requests, spent) = samples.get(start).copied().unwrap_or((now, 0, 0));
            let allowed = (stats.requests - requests) / 20;
            (allowed as i64 - (granted - spent) as i64, allowed)
        };
        let id = &self.load.ids[i];
        let (mut least, mut most, mut none) = (Duration::MAX, Duration::ZERO, 0);
        let mut co_owners_out = Vec::new();
        for m in 0..MODELS {
            let model = ModelId::new(&format!("model-{m}")).expect("a valid ID");
            let owners = self.load.handle.owners(&model);
            if !owners.contains(id) {
                continue;
            }
            match self.hedges.delay(&model) {
                Some(d) => (least, most) = (least.min(d), most.max(d)),
                None => none += 1,
            }
            for owner in owners.iter().filter(|o| *o != id) {
                let j = self.load.ids.iter().position(|x| x == owner);
                if let Some(j) = j.filter(|&j| self.out(j) && !co_owners_out.contains(&j)) {
                    co_owners_out.push(j);
                }
            }
        }
        HedgeState {
            stats,
            budget_left,
            delays: (least, most, none),
            co_owners_out,
        }
    }

    /// The figures of backend `i`'s fault from `faulted_at` until it was
    /// seen out at `seen`, and how many of the requests it was given were
    /// backups that lost their race (dropped once their first attempt,
    /// elsewhere, answered).
    pub fn figures(
        &self,
        i: usize,
        faulted_at: Instant,
        seen: Instant,
        before: &HedgeState,
    ) -> (String, u64) {
        let trip = {
            let log = self.transitions.lock().unwrap_or_else(|e| e.into_inner());
            log.iter()
                .find(|(at, id, t)| {
                    *id == self.load.ids[i] && *at >= faulted_at && t.to == BreakerState::Open
                })
                .map(|(at, _, t)| (*at, t.reason))
        };
        let until = trip.map_or(seen, |(at, _)| at);
        let given = self.logs[i].between(faulted_at, seen);
        let (to_trip, after): (Vec<Entry>, Vec<Entry>) = given.iter().partition(|e| e.at <= until);
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let mut by_via = Vec::new();
        for via in Via::ALL {
            let of: Vec<&Entry> = to_trip.iter().filter(|e| e.via == via).collect();
            if of.is_empty() {
                continue;
            }
            let ended = |end: End| {
                let ages: Vec<f64> = of
                    .iter()
                    .filter_map(|e| {
                        e.end
                            .filter(|(at, x)| *x == end && *at <= until)
                            .map(|(at, _)| ms(at - e.at))
                    })
                    .collect();
                match ages.len() {
                    0 => String::new(),
                    n => format!(
                        " {n} {end:?} after {:.0}-{:.0} ms",
                        ages.iter().copied().fold(f64::MAX, f64::min),
                        ages.iter().copied().fold(0.0, f64::max)
                    ),
                }
            };
            by_via.push(format!(
                "{via:?} {}{}{}{}",
                of.len(),
                ended(End::Dropped),
                ended(End::Failed),
                ended(End::Answered)
            ));
        }
        let now = self.hedges.stats();
        let (least, most, none) = before.delays;
        let lost_races = given
            .iter()
            .filter(|e| e.via == Via::Backup && e.end.is_some_and(|(_, end)| end == End::Dropped))
            .count() as u64;
        let figures = format!(
            "chaos:   node-{i} given {} until {}, {} after: {}; hedges in between {} sent, {} won, \
             suppressed {} by budget, {} by load; at the fault: budget left ~{} of {}, \
             its models' delays {:.0}-{:.0} ms ({none} unhedged), co-owners out {:?}",
            to_trip.len(),
            match trip {
                Some((at, reason)) => format!("the trip at {:.3} s ({reason:?})", (at - faulted_at).as_secs_f64()),
                None => "out".to_owned(),
            },
            after.len(),
            by_via.join(", "),
            now.hedges - before.stats.hedges,
            now.hedges_won - before.stats.hedges_won,
            now.suppressed_by_budget - before.stats.suppressed_by_budget,
            now.suppressed_by_load - before.stats.suppressed_by_load,
            before.budget_left.0,
            before.budget_left.1,
            ms(least.min(most)),
            ms(most),
            before.co_owners_out,
        );
        (figures, lost_races)
    }

    /// Waits, looking after each finished request, until `done` holds;
    /// how long it took, or `None` after `GIVE_UP`.
    pub async fn until(&self, done: impl Fn() -> bool) -> Option<Duration> {
        self.until_within(GIVE_UP, done).await
    }

    /// As [`Script::until`], giving up after `limit`.
    pub async fn until_within(&self, limit: Duration, done: impl Fn() -> bool) -> Option<Duration> {
        let start = Instant::now();
        let mut progress = self.load.progress.subscribe();
        loop {
            if done() {
                return Some(start.elapsed());
            }
            let left = limit.checked_sub(start.elapsed())?;
            let _ = tokio::time::timeout(left, progress.changed()).await;
        }
    }

    /// Waits until `n` more requests have finished.
    pub async fn requests(&self, n: u64) {
        let target = self.finished() + n;
        let _ = self.until(|| self.finished() >= target).await;
    }

    /// Puts backend `i` (its server in `slot`) under `action`, holds it
    /// until out and `HOLD` requests later, heals it and waits until back.
    pub async fn episode(
        &self,
        i: usize,
        slot: &mut Option<ModelServer>,
        fault: &'static str,
        action: Action,
        hold: u64,
    ) -> Episode {
        let hedging = self.hedge_state(i);
        let before = self.sent_to[i].load(Ordering::Relaxed);
        let faulted_at = Instant::now();
        self.load.faulted[i].store(true, Ordering::Relaxed);
        let (name, config, addr) = {
            let server = slot.as_ref().expect("the server runs");
            (
                server.name().to_owned(),
                server.config().clone(),
                server.addr(),
            )
        };
        match action {
            Action::Kill => slot.take().expect("the server runs").stop().await,
            Action::Set(fault) => slot
                .as_ref()
                .expect("the server runs")
                .set_fault(Some(fault)),
        }
        let out = self.until(|| self.out(i)).await;
        let given = self.sent_to[i].load(Ordering::Relaxed) - before;
        let (figures, lost_races) = self.figures(i, faulted_at, Instant::now(), &hedging);
        // Backups that lost their race are not counted: see `OUT_REQUESTS`.
        let out = out.map(|t| (given - lost_races, t));
        self.requests(hold).await;
        match action {
            Action::Kill => {
                let server = ModelServer::start_on(&name, config, addr)
                    .await
                    .expect("the port is free again");
                *slot = Some(server);
            }
            Action::Set(_) => slot.as_ref().expect("the server runs").set_fault(None),
        }
        let healed_at = Instant::now();
        let bound = self.open_duration(i) + PROBE_ROUND.max(TIMEOUT);
        let status = &self.load.handle.backends()[i];
        let reopened = self.load.handle.breaker(&status.id).expect("current");
        let at_heal = (status.breaker, reopened.stats().reopened, status.ejected);
        self.load.faulted[i].store(false, Ordering::Relaxed);
        // Each change of its ejection seen, in ms after healing, with the
        // kind of ejection (a score's, or an outlier's: timed).
        let kind = || {
            let status = self.load.handle.health(&self.load.ids[i]);
            status.and_then(|h| h.ejected)
        };
        let ejections = Mutex::new(vec![(0, at_heal.2, kind())]);
        let back = self
            .until_within(BACK_GIVE_UP, || {
                let b = &self.load.handle.backends()[i];
                let mut seen = ejections.lock().unwrap_or_else(|e| e.into_inner());
                if seen.last().is_some_and(|&(_, was, _)| was != b.ejected) {
                    seen.push((healed_at.elapsed().as_millis(), b.ejected, kind()));
                }
                self.back(i)
            })
            .await;
        let ejections = ejections.into_inner().unwrap_or_default();
        let last_ejection = ejections.iter().rev().find(|&&(_, ejected, _)| ejected);
        let times_ejected = self.load.handle.backends()[i].ejections;
        let health_bound = last_ejection.map(|&(ms, _, why)| {
            let ms = u64::try_from(ms).unwrap_or(u64::MAX);
            let readmitted = match why {
                Some(Ejection::Outlier) => outlier_readmission(times_ejected),
                _ => readmission(&chaos_stack::health_policy()),
            };
            Duration::from_millis(ms) + readmitted + PROBE_ROUND.max(TIMEOUT)
        });
        let figures = format!(
            "{figures}\nchaos:   node-{i} after healing: ejected (ms, out, why) {:?}; breaker {}",
            ejections,
            {
                let log = self.transitions.lock().unwrap_or_else(|e| e.into_inner());
                log.iter()
                    .filter(|(at, id, _)| *id == self.load.ids[i] && *at > healed_at)
                    .map(|(at, _, t)| {
                        format!(
                            "{:?} at {} ms ({:?})",
                            t.to,
                            (*at - healed_at).as_millis(),
                            t.reason
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        );
        // A half-open probe sent before healing may fail after it (a hung
        // request's timeout) and reopen the breaker: the open duration then
        // in force counts from that reopening.
        let (mut bound, mut from) = (bound, healed_at);
        let reopenings: Vec<Instant> = {
            let log = self.transitions.lock().unwrap_or_else(|e| e.into_inner());
            log.iter()
                .filter(|(at, id, t)| {
                    *id == self.load.ids[i] && *at > healed_at && t.to == BreakerState::Open
                })
                .map(|(at, _, _)| *at)
                .collect()
        };
        if let Some(&last) = reopenings.last() {
            let reopened = at_heal.1 + reopenings.len() as u32;
            bound = self.ceiling(reopened) + PROBE_ROUND.max(TIMEOUT);
            from = last;
        }
        let bound = Bound {
            breaker: (from - healed_at) + bound,
            health: health_bound,
        };
        let health = self.load.handle.health(&self.load.ids[i]);
        Episode {
            backend: i,
            fault,
            out,
            back,
            bound,
            faulted_at,
            healed_at,
            at_heal,
            health,
            figures,
        }
    }
}
