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

use crate::chaos_episode;
use crate::chaos_script;
use crate::chaos_stack;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tower_model_balance_sim::{Fault, InferenceTimes, ModelServer, ServerConfig};

use chaos_episode::{Episode, GIVE_UP};
use chaos_script::{Action, Script};
use chaos_stack::{build, trips, worker, Kind, Load, Tally, CONCURRENCY, SERVER_CONCURRENCY};

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
        let quiet = |s: &tower_model_balance_sim::ServerStats| {
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
        handle.stats().breaker_trips,
        handle.stats().ejections,
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
