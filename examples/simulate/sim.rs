//! The discrete-event loop: arrivals, completions, membership changes and
//! probes in virtual time, with Tokio's paused clock kept in step (to the
//! millisecond) so the balancer's own tasks — discovery, staging steps,
//! health evaluation — run at the virtual times they would.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::SeedableRng;
use tokio::time::Instant;

use crate::args::Config;
use crate::fleet::{Server, FAIL_NS};
use crate::metrics::Metrics;
use crate::queue::{Nanos, Queue};
use crate::strategy::{self, Names, Router, Token, View};
use crate::workload::{Request, Workload};

/// Seconds between two probes of each backend's readiness and models.
const PROBE_NS: Nanos = 5_000_000_000;

/// A change to the fleet.
#[derive(Debug, Clone)]
pub enum Change {
    /// These backends answer every request with an error from now on.
    Fail(Vec<u32>),
    Recover(Vec<u32>),
    Leave(Vec<u32>),
    Join(Vec<u32>),
}

/// What one run does.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Requests sent in all.
    pub requests: usize,
    /// Requests arriving in `[from, to)` are measured.
    pub measure: (Nanos, Nanos),
    /// Changes, by time.
    pub changes: Vec<(Nanos, Change)>,
    /// Backends `0..initial` start in the fleet.
    pub initial: usize,
    /// Backends there may ever be (joiners get the indices after
    /// `initial`).
    pub total: usize,
}

enum Event {
    Arrival(Request),
    Done(u32),
    Change(usize),
    Probe,
}

struct Live {
    arrival: Nanos,
    req: Request,
    backend: u32,
    token: Token,
    failed: bool,
    cold: bool,
    measured: bool,
}

/// The fleet and the requests in it.
struct State<'a> {
    workload: &'a Workload,
    servers: Vec<Server>,
    slab: Vec<Option<Live>>,
    free: Vec<u32>,
    queue: Queue<Event>,
    metrics: Metrics,
    in_flight: Vec<u32>,
    total_in_flight: u64,
}

impl State<'_> {
    fn insert(&mut self, live: Live) -> u32 {
        match self.free.pop() {
            Some(slot) => {
                self.slab[slot as usize] = Some(live);
                slot
            }
            None => {
                self.slab.push(Some(live));
                (self.slab.len() - 1) as u32
            }
        }
    }

    /// Starts serving the request in `slot` on its backend at `now`.
    fn start(&mut self, slot: u32, now: Nanos) {
        let live = self.slab[slot as usize].as_mut().expect("a live request");
        let model = (!live.req.update).then(|| {
            let id = live.req.model;
            (id, &self.workload.models[id as usize])
        });
        let service = self.servers[live.backend as usize].serve(model, now);
        live.cold = service.cold;
        if service.loaded {
            self.metrics.load_started(now, live.measured);
        }
        self.queue.push(service.end, Event::Done(slot));
    }
}

/// Runs `strategy` through `plan`; call inside a paused current-thread
/// runtime.
pub async fn run(
    config: &Config,
    workload: &Workload,
    names: &Names,
    plan: &Plan,
    strategy: &str,
    staged: bool,
) -> Metrics {
    let start = Instant::now();
    let mut members: Vec<u32> = (0..plan.initial as u32).collect();
    let mut router = strategy::build(strategy, config, names, &members, start, staged);
    settle().await;
    let mut state = State {
        workload,
        servers: (0..plan.total)
            .map(|_| Server::new(config.serving_slots, config.model_slots))
            .collect(),
        slab: Vec::new(),
        free: Vec::new(),
        queue: Queue::new(),
        metrics: Metrics::new(plan.total),
        in_flight: vec![0; plan.total],
        total_in_flight: 0,
    };
    let mut rng = SmallRng::seed_from_u64(config.seed);
    let (gap, first) = workload.next(&mut rng);
    state.queue.push(gap, Event::Arrival(first));
    let mut sent = 1;
    for (i, (at, _)) in plan.changes.iter().enumerate() {
        state.queue.push(*at, Event::Change(i));
    }
    state.queue.push(PROBE_NS, Event::Probe);
    let mut clock_ms = 0;
    while let Some((now, event)) = state.queue.pop() {
        let ms = now / 1_000_000;
        if ms > clock_ms {
            tokio::time::advance(Duration::from_millis(ms - clock_ms)).await;
            clock_ms = ms;
        }
        match event {
            Event::Arrival(req) => {
                if sent < plan.requests {
                    let (gap, next) = workload.next(&mut rng);
                    state.queue.push(now + gap, Event::Arrival(next));
                    sent += 1;
                }
                arrive(&mut state, router.as_mut(), plan, req, now);
            }
            Event::Done(slot) => {
                let live = state.slab[slot as usize].take().expect("a live request");
                state.free.push(slot);
                let b = live.backend as usize;
                state.in_flight[b] -= 1;
                state.total_in_flight -= 1;
                if !live.failed {
                    if let Some(next) = state.servers[b].release() {
                        state.start(next, now);
                    }
                }
                router.finish(live.token, !live.failed, now);
                if live.measured {
                    let latency = now - live.arrival;
                    let inference = !live.req.update;
                    state
                        .metrics
                        .finished(latency, inference, !live.failed, live.cold);
                }
            }
            Event::Change(i) => {
                apply(&plan.changes[i].1, &mut state.servers, &mut members);
                router.set_members(&members);
                settle().await;
            }
            Event::Probe => {
                for &b in &members {
                    let server = &state.servers[b as usize];
                    router.probe(b, !server.failed, &mut server.memory.loaded(now));
                }
                if sent < plan.requests {
                    state.queue.push(now + PROBE_NS, Event::Probe);
                }
            }
        }
    }
    drop(router);
    settle().await;
    state.metrics
}

/// Routes one arriving request and sends it to its backend.
fn arrive(state: &mut State<'_>, router: &mut dyn Router, plan: &Plan, req: Request, now: Nanos) {
    let measured = (plan.measure.0..plan.measure.1).contains(&now);
    let view = View {
        in_flight: &state.in_flight,
        total_in_flight: state.total_in_flight,
    };
    let Some((backend, token)) = router.pick(req, now, &view) else {
        if measured {
            state.metrics.finished(0, !req.update, false, false);
        }
        return;
    };
    let b = backend as usize;
    state.in_flight[b] += 1;
    state.total_in_flight += 1;
    if measured {
        state.metrics.per_backend[b] += 1;
    }
    let failed = state.servers[b].failed;
    let slot = state.insert(Live {
        arrival: now,
        req,
        backend,
        token,
        failed,
        cold: false,
        measured,
    });
    if failed {
        state.queue.push(now + FAIL_NS, Event::Done(slot));
    } else if state.servers[b].admit(slot) {
        state.start(slot, now);
    }
}

fn apply(change: &Change, servers: &mut [Server], members: &mut Vec<u32>) {
    match change {
        Change::Fail(set) => set.iter().for_each(|&b| servers[b as usize].failed = true),
        Change::Recover(set) => set.iter().for_each(|&b| servers[b as usize].failed = false),
        Change::Leave(set) => members.retain(|b| !set.contains(b)),
        Change::Join(set) => members.extend(set),
    }
}

/// Lets the balancer's tasks (discovery) take what was just sent.
async fn settle() {
    for _ in 0..8 {
        tokio::task::yield_now().await;
    }
}

/// Runs `f` on a fresh current-thread runtime with Tokio's clock paused.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    runtime.block_on(f)
}
