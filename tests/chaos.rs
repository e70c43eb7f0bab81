//! The chaos suite: 8 simulated model servers on loopback behind the whole
//! stack (route, retry and hedge, balancer, per-backend breakers with a
//! timeout below each, health with active probes), 64 workers sending at
//! least 20,000 requests, and a scripted timeline of faults: a backend
//! killed and restarted on its port, one 10× slow, connections reset
//! mid-response, one that hangs (caught by the timeout) — one after the
//! other — and, all along, one flapping between 503 and 200.
//!
//! The timeline is driven by events and counts, never by sleeping: each
//! fault is held until its backend is out of rotation (breaker open or
//! ejected by health) and a number of requests have resolved since, then
//! healed and held until the backend is back (breaker closed, not
//! ejected). Wall time is only measured, for the bounds asserted:
//!
//! * every request resolves (ok plus each typed error kind = sent), and
//!   nothing panics;
//! * at least 99.5% succeed of the requests whose model had, when sent, an
//!   owner under no scripted fault;
//! * each fault takes its backend out of rotation within 20 requests sent
//!   to it (counted at its endpoint, below the breaker; a hedge's backup
//!   that lost its race there is not one, see `OUT_REQUESTS`) and within
//!   2 s;
//! * each healed backend is back within its breaker's open duration then
//!   in force (the backoff's ceiling, counted from healing or from a
//!   reopening after it: a half-open probe sent before healing may fail
//!   after it) plus one probe round — the longer of an active probe round
//!   and a half-open round, whose probes answer or time out within the
//!   timeout; unless health ejected it at healing or after: then within
//!   health's readmission bound (see `Bound`);
//! * in the end nothing is in flight, at the balancer or the servers.
//!
//! The closing line: `chaos: N sent, N resolved, 0 lost, S% success`.

#[path = "support/chaos_log.rs"]
mod chaos_log;
#[path = "support/chaos_stack.rs"]
mod chaos_stack;
#[path = "support/lcg.rs"]
mod lcg;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tower_model_balance::breaker::{BreakerState, Policy};
use tower_model_balance::health::{HealthPolicy, HealthStatus};
use tower_model_balance::hedge::{HedgeHandle, HedgeStats};
use tower_model_balance::route::ModelId;
use tower_model_balance::sim::{Fault, InferenceTimes, ModelServer, ServerConfig};

use chaos_log::{End, Entry, Log, Via};
use chaos_stack::{
    build, trips, worker, Kind, Load, Tally, CONCURRENCY, MODELS, PROBE_ROUND, SERVER_CONCURRENCY,
    TIMEOUT,
};

const BACKENDS: usize = 8;
const MIN_REQUESTS: u64 = 20_000;
const KILLED: usize = 1;
const SLOW: usize = 2;
const FLAPPING: usize = 3;
const RESET: usize = 4;
const HUNG: usize = 5;
/// Requests resolved before the first fault: latency baselines, hedge
/// delays, resident models.
const WARM_UP: u64 = 2_000;
/// Requests resolved while a fault holds, once its backend is out.
const HOLD: u64 = 1_500;
/// Requests resolved between one fault's end and the next.
const GAP: u64 = 1_000;
/// The flapping backend's phases, in requests resolved.
const FLAP: u64 = 1_500;
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
const OUT_REQUESTS: u64 = 20;
/// ...and this long.
const OUT_TIME: Duration = Duration::from_secs(2);
/// How long the timeline waits for an event before it records a miss
/// (asserted at the end, with every figure printed).
const GIVE_UP: Duration = Duration::from_secs(15);

/// One fault, from injection to its backend's return.
struct Episode {
    backend: usize,
    fault: &'static str,
    /// Requests sent to the backend, and the time, until it was out.
    out: Option<(u64, Duration)>,
    /// Time from healing until it was back, and the bound asserted (see
    /// `Episode::back_limit`).
    back: Option<Duration>,
    bound: Bound,
    /// When it was faulted and healed.
    faulted_at: Instant,
    healed_at: Instant,
    /// At healing: its breaker's state and reopenings, whether ejected.
    at_heal: (BreakerState, u32, bool),
    /// Its health when it was back, or when the timeline gave up.
    health: Option<HealthStatus>,
    /// How it was found: the requests it was given until out, by how they
    /// reached it and ended, and the hedging's state.
    figures: String,
}

impl Episode {
    fn ok(&self) -> bool {
        let out = self
            .out
            .is_some_and(|(n, t)| n <= OUT_REQUESTS && t <= OUT_TIME);
        out && self.back.is_some_and(|t| t <= self.back_limit())
    }

    fn back_limit(&self) -> Duration {
        self.bound
            .breaker
            .max(self.bound.health.unwrap_or_default())
    }

    fn line(&self) -> String {
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
                GIVE_UP.as_secs(),
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
/// last ejection seen plus `readmission` plus a probe round as above.
struct Bound {
    breaker: Duration,
    health: Option<Duration>,
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
fn readmission(health: &HealthPolicy) -> Duration {
    const WEIGHTS: [f64; 3] = [0.5, 0.33, 0.17];
    const INTERVAL: Duration = Duration::from_secs(1);
    const ERROR_ALPHA: f64 = 0.2;
    const THRESHOLDS: (f64, f64) = (0.2, 0.35);
    let [latency, capacity, connection] = WEIGHTS;
    let (eject_below, readmit_above) = THRESHOLDS;
    let spelled = HealthPolicy::builder()
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

/// What the timeline drives a fault with.
#[derive(Clone, Copy)]
enum Action {
    Kill,
    Set(Fault),
}

/// Shared by the timeline and the flapper.
struct Script {
    load: Arc<Load>,
    transitions: chaos_stack::Transitions,
    sent_to: Vec<Arc<AtomicU64>>,
    logs: Vec<Log>,
    hedges: HedgeHandle,
    /// (when, requests the hedge layer counted, extra attempts granted),
    /// after each finished request: the budget's window, read back.
    budget: Mutex<Vec<(Instant, u64, u64)>>,
    policy: Policy,
}

/// What the hedging looked like when a fault began.
struct HedgeState {
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
    fn finished(&self) -> u64 {
        *self.load.progress.borrow()
    }

    fn out(&self, i: usize) -> bool {
        let b = &self.load.handle.backends()[i];
        b.breaker == BreakerState::Open || b.ejected
    }

    fn back(&self, i: usize) -> bool {
        let b = &self.load.handle.backends()[i];
        b.breaker == BreakerState::Closed && !b.ejected
    }

    /// The open duration in force for backend `i` now: the backoff's
    /// ceiling after its breaker's reopenings in a row.
    fn open_duration(&self, i: usize) -> Duration {
        let id = &self.load.ids[i];
        let breaker = self.load.handle.breaker(id).expect("a current backend");
        self.ceiling(breaker.metrics().reopened)
    }

    /// The backoff's ceiling after `reopened` reopenings in a row.
    fn ceiling(&self, reopened: u32) -> Duration {
        let reopened = reopened.min(31);
        let ceiling = self.policy.open_duration().saturating_mul(1 << reopened);
        ceiling.min(self.policy.max_open_duration())
    }

    /// Samples the budget after each finished request until `done`.
    async fn sample_budget(&self, done: &AtomicBool) {
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

    fn hedge_state(&self, i: usize) -> HedgeState {
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
    fn figures(
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
    async fn until(&self, done: impl Fn() -> bool) -> Option<Duration> {
        let start = Instant::now();
        let mut progress = self.load.progress.subscribe();
        loop {
            if done() {
                return Some(start.elapsed());
            }
            let left = GIVE_UP.checked_sub(start.elapsed())?;
            let _ = tokio::time::timeout(left, progress.changed()).await;
        }
    }

    /// Waits until `n` more requests have finished.
    async fn requests(&self, n: u64) {
        let target = self.finished() + n;
        let _ = self.until(|| self.finished() >= target).await;
    }

    /// Puts backend `i` (its server in `slot`) under `action`, holds it
    /// until out and `HOLD` requests later, heals it and waits until back.
    async fn episode(
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
        let at_heal = (status.breaker, reopened.metrics().reopened, status.ejected);
        self.load.faulted[i].store(false, Ordering::Relaxed);
        // Each change of its ejection seen, in ms after healing.
        let ejections = Mutex::new(vec![(0, at_heal.2)]);
        let back = self
            .until(|| {
                let b = &self.load.handle.backends()[i];
                let mut seen = ejections.lock().unwrap_or_else(|e| e.into_inner());
                if seen.last().is_some_and(|&(_, was)| was != b.ejected) {
                    seen.push((healed_at.elapsed().as_millis(), b.ejected));
                }
                self.back(i)
            })
            .await;
        let ejections = ejections.into_inner().unwrap_or_default();
        let last_ejection = ejections.iter().rev().find(|&&(_, ejected)| ejected);
        let health_bound = last_ejection.map(|&(ms, _)| {
            let ms = u64::try_from(ms).unwrap_or(u64::MAX);
            Duration::from_millis(ms)
                + readmission(&chaos_stack::health_policy())
                + PROBE_ROUND.max(TIMEOUT)
        });
        let figures = format!(
            "{figures}\nchaos:   node-{i} after healing: ejected (ms, bool) {:?}; breaker {}",
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

/// The timeline: each fault in turn, `GAP` requests apart.
async fn timeline(script: &Script, servers: &mut [Option<ModelServer>]) -> Vec<Episode> {
    let slow = Fault::Slow {
        factor: 10,
        share: 1.0,
    };
    let faults = [
        (KILLED, "killed and restarted", Action::Kill),
        (SLOW, "10x slow", Action::Set(slow)),
        (RESET, "reset mid-response", Action::Set(Fault::Reset)),
        (HUNG, "hung", Action::Set(Fault::Hang)),
    ];
    let mut episodes = Vec::new();
    for (i, name, action) in faults {
        episodes.push(script.episode(i, &mut servers[i], name, action, HOLD).await);
        script.requests(GAP).await;
    }
    episodes
}

/// The flapping backend: 503 until out and `FLAP` requests, then 200 until
/// back and `FLAP` requests, again and again until `done`.
async fn flap(
    script: Arc<Script>,
    mut server: Option<ModelServer>,
    done: Arc<AtomicBool>,
) -> (Vec<Episode>, Option<ModelServer>) {
    let mut episodes = Vec::new();
    while !done.load(Ordering::Relaxed) {
        let fault = Action::Set(Fault::Unavailable);
        let episode = script.episode(FLAPPING, &mut server, "flapping 503", fault, FLAP);
        episodes.push(episode.await);
        script.requests(FLAP).await;
    }
    (episodes, server)
}

/// Counts panics on any thread (the workers', the balancer's tasks', the
/// servers'), still printing them.
fn count_panics() -> Arc<AtomicU64> {
    let panics = Arc::new(AtomicU64::new(0));
    let counted = panics.clone();
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        counted.fetch_add(1, Ordering::Relaxed);
        default(info);
    }));
    panics
}

fn server_config() -> ServerConfig {
    ServerConfig::builder()
        .concurrency(SERVER_CONCURRENCY)
        .resident_slots(8)
        .cold_load(Duration::from_millis(5))
        .update_time(Duration::from_millis(40))
        .inference(InferenceTimes::new(7, 30, 50).expect("a valid range"))
        .build()
        .expect("a valid config")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos() {
    let panics = count_panics();
    let started = Instant::now();
    let mut servers = Vec::new();
    for i in 0..BACKENDS {
        let server = ModelServer::start(&format!("node-{i}"), server_config()).await;
        servers.push(Some(server.expect("bound on loopback")));
    }
    let running: Vec<&ModelServer> = servers.iter().flatten().collect();
    let built = build(&running);
    let load = Arc::new(Load {
        stack: built.stack.clone(),
        handle: built.handle.clone(),
        tally: Tally::default(),
        faulted: (0..BACKENDS).map(|_| AtomicBool::new(false)).collect(),
        progress: watch::Sender::new(0),
        stop: AtomicBool::new(false),
        ids: built.handle.backends().into_iter().map(|b| b.id).collect(),
    });
    let script = Arc::new(Script {
        load: load.clone(),
        transitions: built.transitions.clone(),
        sent_to: built.sent_to.clone(),
        logs: built.logs.clone(),
        hedges: built.hedges.clone(),
        budget: Mutex::default(),
        policy: built.policy.clone(),
    });
    let sampled = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (script, done) = (script.clone(), sampled.clone());
        tokio::spawn(async move { script.sample_budget(&done).await })
    };
    let workers: Vec<_> = (0..CONCURRENCY as u64)
        .map(|w| tokio::spawn(worker(load.clone(), w + 1)))
        .collect();

    script.requests(WARM_UP).await;
    let done = Arc::new(AtomicBool::new(false));
    let flapper = tokio::spawn(flap(script.clone(), servers[FLAPPING].take(), done.clone()));
    let mut episodes = timeline(&script, &mut servers).await;
    done.store(true, Ordering::Relaxed);
    let (flaps, flapped) = flapper.await.expect("the flapper does not panic");
    servers[FLAPPING] = flapped;
    episodes.extend(flaps);
    let _ = script.until(|| script.finished() >= MIN_REQUESTS).await;
    load.stop.store(true, Ordering::Relaxed);
    sampled.store(true, Ordering::Relaxed);
    let mut joined = 0;
    for w in workers {
        joined += usize::from(w.await.is_ok());
    }
    let elapsed = started.elapsed();
    let _ = sampler.await;

    // Nothing in flight: at the balancer, and at the servers (a request
    // its client gave up on is released once the connection closes).
    let handle = &built.handle;
    let idle = script.until(|| handle.in_flight() == 0).await.is_some();
    let mut busy_servers = Vec::new();
    for server in servers.iter().flatten() {
        let quiet = |s: &tower_model_balance::sim::ServerStats| {
            s.running == 0 && s.waiting == 0 && s.hung == 0
        };
        let waited = tokio::time::timeout(GIVE_UP, server.wait_for_stats(quiet)).await;
        if waited.is_err() {
            busy_servers.push((server.name().to_owned(), server.stats()));
        }
    }

    let tally = &load.tally;
    let sent = tally.sent.load(Ordering::Relaxed);
    let resolved = tally.resolved();
    let lost = sent - resolved;
    let covered = tally.covered.load(Ordering::Relaxed);
    let covered_ok = tally.covered_ok.load(Ordering::Relaxed);
    let success = 100.0 * covered_ok as f64 / covered.max(1) as f64;
    let mut report = String::new();
    for episode in &episodes {
        let _ = writeln!(report, "{}\n{}", episode.line(), episode.figures);
    }
    // Trips of a backend under no fault (diagnostics).
    for (at, id, t) in trips(&built.transitions) {
        let i = load.ids.iter().position(|x| *x == id).expect("a backend");
        let faulted = episodes.iter().any(|e| {
            e.backend == i && e.faulted_at <= at && at <= e.healed_at + e.back.unwrap_or(GIVE_UP)
        });
        if !faulted {
            let _ = writeln!(
                report,
                "chaos: node-{i} tripped under no fault at {:.3} s: {:?}",
                (at - started).as_secs_f64(),
                t.reason
            );
        }
    }
    let kinds: Vec<String> = Kind::ALL
        .iter()
        .map(|&k| format!("{k:?} {}", tally.count(k)))
        .collect();
    let _ = writeln!(
        report,
        "chaos: {} ({covered} requests with an owner under no fault, {covered_ok} ok); \
         hedges {:?}; breaker trips {}, ejections {}; {:.1} s",
        kinds.join(", "),
        built.hedges.stats(),
        handle.breaker_trips(),
        handle.ejections(),
        elapsed.as_secs_f64(),
    );
    let _ = write!(
        report,
        "chaos: {sent} sent, {resolved} resolved, {lost} lost, {success:.2}% success"
    );
    println!("{report}");

    assert_eq!(panics.load(Ordering::Relaxed), 0, "a panic:\n{report}");
    assert_eq!(joined, CONCURRENCY, "every worker ended:\n{report}");
    assert_eq!(lost, 0, "every request resolves:\n{report}");
    assert!(sent >= MIN_REQUESTS, "enough requests:\n{report}");
    assert!(success >= 99.5, "success rate:\n{report}");
    assert!(
        episodes.iter().all(Episode::ok),
        "each fault out in time and back in time:\n{report}"
    );
    assert!(
        episodes.iter().filter(|e| e.backend == FLAPPING).count() >= 2,
        "the backend flapped:\n{report}"
    );
    assert!(
        idle,
        "nothing in flight at the balancer: {:?}\n{report}",
        handle.backends()
    );
    assert!(
        busy_servers.is_empty(),
        "nothing in flight at the servers: {busy_servers:?}\n{report}"
    );
}
