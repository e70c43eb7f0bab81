//! The discrete-event loop: arrivals, completions, membership changes and
//! probes in virtual time, with Tokio's paused clock kept in step (to the
//! millisecond) so the balancer's own tasks — discovery, staging steps,
//! health evaluation — run at the virtual times they would.

use std::collections::VecDeque;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::SeedableRng;
use tokio::time::Instant;

use crate::batching;
use crate::config::Config;
use crate::fleet::{Arrival, Server, FAIL_NS};
use crate::metrics::Metrics;
use crate::placement;
use crate::queue::{Nanos, Queue};
use crate::strategy::{self, Names, Router, Token, View};
use crate::workload::{Request, Workload, UPDATE_NS};

/// Seconds between two probes of each backend's readiness and models.
const PROBE_NS: Nanos = 5_000_000_000;
/// The client gives a request up after this long: it fails (a timeout
/// inside the breaker), and the backend drops it unserved if it has not
/// started it (the connection is gone); one already in service runs on.
pub const DEADLINE_NS: Nanos = 20_000_000_000;

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
    /// Keep latencies by slices of this width from the window's start too.
    pub slice: Option<Nanos>,
}

enum Event {
    Arrival(Request),
    /// The request's model is loaded: it queues for a serving slot.
    Ready(u32),
    Done(u32),
    /// The client's deadline for the request with this ID in this slot.
    Timeout(u32, u64),
    Change(usize),
    Probe,
}

struct Live {
    id: u64,
    arrival: Nanos,
    req: Request,
    backend: u32,
    /// Until the client has its answer (a response or its timeout).
    token: Option<Token>,
    failed: bool,
    cold: bool,
    measured: bool,
}

/// The fleet and the requests in it.
struct State<'a> {
    workload: &'a Workload,
    /// How much each request in service slows the others (see
    /// [`batching`]).
    batch_slowdown: f64,
    servers: Vec<Server>,
    slab: Vec<Option<Live>>,
    free: Vec<u32>,
    queue: Queue<Event>,
    metrics: Metrics,
    in_flight: Vec<u32>,
    total_in_flight: u64,
    /// When each backend's in-flight count last changed.
    since: Vec<Nanos>,
    /// Serving slots busy on each backend, and since when.
    busy: Vec<u32>,
    busy_since: Vec<Nanos>,
    /// The measurement window, for the occupancy integral.
    window: (Nanos, Nanos),
    /// The time of the last event.
    queue_end: Nanos,
    next_id: u64,
    /// Client deadlines, in arrival order: (when, slot, request ID).
    deadlines: VecDeque<(Nanos, u32, u64)>,
}

impl State<'_> {
    /// Adds `delta` to `b`'s in-flight count at `now`, first adding the
    /// count's time integral within the measurement window.
    fn in_flight_change(&mut self, b: usize, delta: i32, now: Nanos) {
        let (from, to) = (self.since[b].max(self.window.0), now.min(self.window.1));
        if to > from {
            self.metrics.occupancy[b] += f64::from(self.in_flight[b]) * (to - from) as f64;
        }
        self.since[b] = now;
        self.in_flight[b] = self.in_flight[b].saturating_add_signed(delta);
        self.total_in_flight = self.total_in_flight.saturating_add_signed(i64::from(delta));
    }

    /// Adds `delta` to `b`'s busy serving slots at `now`, first adding
    /// the count's time integral within the measurement window.
    fn busy_change(&mut self, b: usize, delta: i32, now: Nanos) {
        let (from, to) = (
            self.busy_since[b].max(self.window.0),
            now.min(self.window.1),
        );
        if to > from {
            self.metrics.busy[b] += f64::from(self.busy[b]) * (to - from) as f64;
        }
        self.busy_since[b] = now;
        self.busy[b] = self.busy[b].saturating_add_signed(delta);
    }

    /// The last request arrived at `now`: keeps each backend's in-flight
    /// integral so far, the measured window's arrivals being over (the
    /// rest of the run drains the fleet).
    fn arrivals_end(&mut self, plan: &Plan, now: Nanos) {
        for b in 0..self.in_flight.len() {
            self.in_flight_change(b, 0, now);
        }
        self.metrics.arrivals_occupancy = self.metrics.occupancy.clone();
        let end = now.min(plan.measure.1);
        self.metrics.arrivals_window_ns = end.saturating_sub(plan.measure.0) as f64;
    }

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

    /// Serves the request in `slot` on its backend from `now` (it holds
    /// a serving slot) — or, if its client gave up, drops it and hands the
    /// serving slot on.
    fn start(&mut self, mut slot: u32, now: Nanos) {
        loop {
            let live = self.slab[slot as usize].as_ref().expect("a live request");
            if live.token.is_some() {
                let b = live.backend as usize;
                // An inference joins the batch of those in service.
                let service = match live.req.update {
                    true => UPDATE_NS,
                    false => batching::service_time(
                        self.workload.models[live.req.model as usize].infer,
                        self.busy[b],
                        self.batch_slowdown,
                    ),
                };
                self.queue.push_after(now, service, Event::Done(slot));
                self.busy_change(b, 1, now);
                return;
            }
            let b = live.backend as usize;
            self.remove(slot);
            match self.servers[b].release() {
                Some(next) => slot = next,
                None => return,
            }
        }
    }

    /// The request in `slot` is ready to be served at `now` (dropped if
    /// its client gave up).
    fn admit(&mut self, slot: u32, now: Nanos) {
        let live = self.slab[slot as usize].as_ref().expect("a live request");
        if live.token.is_none() {
            self.remove(slot);
        } else if self.servers[live.backend as usize].admit(slot) {
            self.start(slot, now);
        }
    }

    fn remove(&mut self, slot: u32) -> Live {
        self.free.push(slot);
        self.slab[slot as usize].take().expect("a live request")
    }

    /// The client has its answer for the request in `slot` at `now`.
    fn answer(&mut self, router: &mut dyn Router, slot: u32, ok: bool, now: Nanos) {
        let live = self.slab[slot as usize].as_mut().expect("a live request");
        let Some(token) = live.token.take() else {
            return;
        };
        let (b, arrival, update, cold, measured) = (
            live.backend as usize,
            live.arrival,
            live.req.update,
            live.cold,
            live.measured,
        );
        router.finish(token, ok, now);
        self.in_flight_change(b, -1, now);
        if measured {
            self.metrics
                .finished(arrival, now - arrival, !update, ok, cold);
        }
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
    let preload = placement::preload(config, names, plan.initial);
    let mut router = strategy::build(strategy, config, names, &members, &preload, start, staged);
    settle().await;
    let mut servers: Vec<Server> = (0..plan.total)
        .map(|_| Server::new(config.serving_slots, config.model_slots))
        .collect();
    for (server, models) in servers.iter_mut().zip(&preload) {
        for &m in models {
            server.memory.load(m, 0, 0);
        }
    }
    let mut state = State {
        workload,
        batch_slowdown: config.batch_slowdown,
        servers,
        slab: Vec::new(),
        free: Vec::new(),
        queue: Queue::new(),
        metrics: Metrics {
            slicing: plan.slice.map(|width| (plan.measure.0, width)),
            ..Metrics::new(plan.total)
        },
        in_flight: vec![0; plan.total],
        total_in_flight: 0,
        since: vec![0; plan.total],
        busy: vec![0; plan.total],
        busy_since: vec![0; plan.total],
        window: plan.measure,
        queue_end: 0,
        next_id: 0,
        deadlines: VecDeque::new(),
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
    // Deadlines come in arrival order: a FIFO beside the heap keeps them.
    loop {
        let due = state.deadlines.front().map(|d| d.0);
        let (now, event) = match (state.queue.next_at(), due) {
            (None, None) => break,
            (Some(at), Some(due)) if due < at => {
                let (due, slot, id) = state.deadlines.pop_front().expect("a deadline");
                (due, Event::Timeout(slot, id))
            }
            (None, Some(_)) => {
                let (due, slot, id) = state.deadlines.pop_front().expect("a deadline");
                (due, Event::Timeout(slot, id))
            }
            _ => state.queue.pop().expect("an event"),
        };
        state.queue_end = now;
        let ms = now / 1_000_000;
        if ms > clock_ms {
            tokio::time::advance(Duration::from_millis(ms - clock_ms)).await;
            clock_ms = ms;
        }
        match event {
            Event::Arrival(req) => {
                let last = sent >= plan.requests;
                if !last {
                    let (gap, next) = workload.next(&mut rng);
                    state.queue.push(now + gap, Event::Arrival(next));
                    sent += 1;
                }
                arrive(&mut state, router.as_mut(), plan, req, now);
                if last {
                    state.arrivals_end(plan, now);
                }
            }
            Event::Ready(slot) => state.admit(slot, now),
            Event::Done(slot) => {
                let (b, failed) = {
                    let live = state.slab[slot as usize].as_ref().expect("a live request");
                    (live.backend as usize, live.failed)
                };
                state.answer(router.as_mut(), slot, !failed, now);
                state.remove(slot);
                if !failed {
                    state.busy_change(b, -1, now);
                    if let Some(next) = state.servers[b].release() {
                        state.start(next, now);
                    }
                }
            }
            Event::Timeout(slot, id) => {
                let current = state.slab[slot as usize].as_ref().map(|l| l.id);
                if current == Some(id) {
                    state.answer(router.as_mut(), slot, false, now);
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
    let end = plan.measure.1.min(state.queue_end);
    for b in 0..plan.total {
        state.in_flight_change(b, 0, end);
        state.busy_change(b, 0, end);
    }
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
            state.metrics.finished(now, 0, !req.update, false, false);
        }
        return;
    };
    let b = backend as usize;
    state.in_flight_change(b, 1, now);
    if measured {
        state.metrics.per_backend[b] += 1;
    }
    let failed = state.servers[b].failed;
    state.next_id += 1;
    let id = state.next_id;
    let slot = state.insert(Live {
        id,
        arrival: now,
        req,
        backend,
        token: Some(token),
        failed,
        cold: false,
        measured,
    });
    if failed {
        state.queue.push_after(now, FAIL_NS, Event::Done(slot));
        return;
    }
    state.deadlines.push_back((now + DEADLINE_NS, slot, id));
    if req.update {
        return state.admit(slot, now);
    }
    let model = &state.workload.models[req.model as usize];
    match state.servers[b].arrive(req.model, model, now) {
        Arrival::Warm => state.admit(slot, now),
        Arrival::Cold { ready, loaded } => {
            if let Some(live) = state.slab[slot as usize].as_mut() {
                live.cold = true;
            }
            if loaded {
                state.metrics.load_started(now, measured);
            }
            state.queue.push(ready, Event::Ready(slot));
        }
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
