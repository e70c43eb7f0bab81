//! One strategy's run: a fresh fleet of simulated servers, the strategy
//! built over it, the planned requests sent open-loop through it, and the
//! figures of what came back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tower::ServiceExt;
use tower_model_balance::balance::{BalanceConfig, BalancerHandle};
use tower_model_balance::error::Overloaded;
use tower_model_balance_eval::workload::Planned;
use tower_model_balance_sim::{protocol, Fault, ModelServer, ServerConfig};

use crate::args::{Args, Scenario};
use crate::etcd;
use crate::record::Record;
use crate::report::{self, Figures};
use crate::strategies::{self, Fleet, Strategy};
use crate::stream;

/// Each request's deadline (`overload`: [`OVERLOAD_DEADLINE`]).
const DEADLINE: Duration = Duration::from_secs(5);
/// Requests sent, uncounted, before the measured run of `slow-tail`: the
/// scenario measures the tail once every model is resident on its owners,
/// not the cold start (whose queues behind loads no hedge can shorten).
pub const WARM_UP: usize = 2_000;
/// The server the scenarios fault.
const FAULTY: usize = 0;
/// Each request's deadline in the `overload` scenario.
pub const OVERLOAD_DEADLINE: Duration = Duration::from_secs(1);

/// One strategy's run: its figures, what the driver saw of each request,
/// and the longest queues.
pub struct Run {
    pub figures: Figures,
    pub records: Vec<Record>,
    /// The most requests that waited for room in the balancer at once
    /// (`model_aware_admission`; 0 for the others).
    pub balancer_queue_peak: u64,
    /// The most requests one server had waiting for a serving slot at once.
    pub server_queue_peak: u64,
}

/// Runs strategy `name` (its row labelled `label`: see [`crate::args::labels`]).
pub async fn run(
    (name, label): (&str, &str),
    args: &Args,
    config: &ServerConfig,
    plan: Arc<Vec<Planned>>,
    warm_up: Option<Arc<Vec<Planned>>>,
) -> std::io::Result<Run> {
    let mut servers = Vec::with_capacity(args.backends);
    for i in 0..args.backends {
        servers.push(ModelServer::start(&format!("sim-{i}"), config.clone()).await?);
    }
    if args.scenario == Scenario::SlowTail {
        servers[FAULTY].set_fault(Some(Fault::Slow {
            factor: 10,
            share: 0.1,
        }));
    }
    // In `slow-tail` every model keeps two warm copies (the 16 slots hold
    // each of the 32 models twice over 8 backends): a hedge's backup needs
    // another backend serving the model, and the balancer refuses one with
    // nowhere warm to go.
    let min_owners = match args.scenario {
        Scenario::SlowTail => 2,
        Scenario::Default | Scenario::Overload | Scenario::Prefix => 1,
    };
    let etcd = etcd::register(args, name, &servers, config.resident_slots()).await?;
    let fleet = Fleet::new(&servers, etcd.as_ref());
    let built = strategies::build(
        name,
        fleet,
        config,
        args.seed,
        args.explicit_load,
        BalanceConfig::builder().min_owners(min_owners),
        None,
    );
    let (strategy, hedge) = (built.strategy, built.hedge);
    // Kept to the end of the run: placement's repository refresh.
    let _placement = built.placement;
    let handle = built.balancer.as_ref().map(|(handle, _probes)| handle);
    if let (Some(etcd), Some(handle)) = (&etcd, handle) {
        etcd.settled(handle, name, args.json).await?;
    }
    if let Some(warm_up) = &warm_up {
        drive(&strategy, &servers, warm_up, args).await;
    }
    // What the warm-up counted, taken off the run's figures.
    let cold_before: u64 = servers.iter().map(|s| s.stats().cold_loads).sum();
    let work_before: Vec<u64> = servers.iter().map(|s| s.stats().work).collect();
    let trips_before = handle.map_or(0, |h| h.stats().breaker_trips);
    let healthy_trips_before = handle.map_or(0, healthy_trips);
    let routed_before = handle.map(|h| h.stats());
    let hedged_before = hedge.as_ref().map(|h| h.stats());
    // The balancer's queue, read every millisecond while the run lasts
    // (its own peak counts the warm-up's too).
    let queue_peak = Arc::new(AtomicU64::new(0));
    let sampling = handle.cloned().map(|h| {
        let peak = queue_peak.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(Duration::from_millis(1));
            loop {
                ticks.tick().await;
                peak.fetch_max(h.queue_len() as u64, Ordering::Relaxed);
            }
        })
    });
    let records = drive(&strategy, &servers, &plan, args).await;
    if let Some(task) = sampling {
        task.abort();
    }
    let cold_loads = servers.iter().map(|s| s.stats().cold_loads).sum::<u64>() - cold_before;
    let loads: Vec<u64> = servers
        .iter()
        .zip(&work_before)
        .map(|(s, before)| s.stats().work - before)
        .collect();
    let trips = handle.map_or(0, |h| h.stats().breaker_trips) - trips_before;
    let healthy_breaker_trips = handle.map_or(0, healthy_trips) - healthy_trips_before;
    if let (Some(handle), Some(b), false) = (handle, routed_before, args.json) {
        let mut s = handle.stats();
        s.resident_owner -= b.resident_owner;
        s.cold_owner -= b.cold_owner;
        s.spill -= b.spill;
        s.panic -= b.panic;
        s.update -= b.update;
        s.no_backend -= b.no_backend;
        s.shed_normal -= b.shed_normal;
        s.shed_critical -= b.shed_critical;
        emit!(
            "{label} routing: {} to a resident owner, {} to a cold owner, {} spilled, {} in panic mode, {} updates by P2C, {} without a backend, {} shed (Normal) and {} (Critical); {} health ejections",
            s.resident_owner, s.cold_owner, s.spill, s.panic, s.update, s.no_backend, s.shed_normal, s.shed_critical, handle.stats().ejections
        );
    }
    let hedged = hedge
        .as_ref()
        .zip(hedged_before)
        .map(|(h, b)| report::hedge_delta(h.stats(), &b));
    let hedges = hedged.map_or((0, 0), |s| (s.hedges, s.hedges_won));
    if let (Some(s), false) = (hedged, args.json) {
        emit!("{label} hedging: {}", report::hedge_line(&s));
    }
    if let (Some(p), false) = (handle.and_then(|h| h.placement_stats()), args.json) {
        emit!(
            "{label} placement: {} loads ({} failed), {} unloads, {} reloads after a 404",
            p.loads,
            p.load_failures,
            p.unloads,
            p.reloads
        );
    }
    let mut figures = report::figures(label, &records, cold_loads, trips, &loads, hedges);
    if args.stream {
        figures.stream = Some(stream::figures(&records));
    }
    figures.healthy_breaker_trips = healthy_breaker_trips;
    figures.max_concurrent_loads = servers
        .iter()
        .map(|s| s.stats().max_concurrent_loads_per_model)
        .max()
        .unwrap_or(0);
    if let Some(etcd) = etcd {
        etcd.deregister().await;
    }
    let balancer_queue_peak = queue_peak.load(Ordering::Relaxed);
    let server_queue_peak = servers
        .iter()
        .map(|s| s.stats().max_waiting)
        .max()
        .unwrap_or(0);
    Ok(Run {
        figures,
        records,
        balancer_queue_peak,
        server_queue_peak,
    })
}

/// Sends the planned requests open-loop and waits for every one to resolve
/// (or reach its deadline).
async fn drive(
    strategy: &Strategy,
    servers: &[ModelServer],
    plan: &[Planned],
    args: &Args,
) -> Vec<Record> {
    let scenario = args.scenario;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let deadline = match scenario {
        Scenario::Overload => OVERLOAD_DEADLINE,
        _ => DEADLINE,
    };
    let start = Instant::now();
    let n = plan.len();
    for (i, planned) in plan.iter().enumerate() {
        if scenario == Scenario::Default && i == n / 3 {
            servers[FAULTY].set_fault(Some(Fault::Unavailable));
        }
        if scenario == Scenario::Default && i == 2 * n / 3 {
            servers[FAULTY].set_fault(None);
        }
        tokio::time::sleep_until(start + planned.at).await;
        let request = build_request(planned, args.stream);
        let strategy = strategy.clone();
        let tx = tx.clone();
        let (inference, critical) = (!planned.update, planned.critical);
        tokio::spawn(async move {
            let sent = Instant::now();
            let reply = tokio::time::timeout(deadline, strategy.oneshot(request)).await;
            let (ok, cold, shed, times) = match reply {
                Ok(Ok(reply)) => {
                    let times = reply.stream.and_then(|s| s.times(sent));
                    (reply.ok, reply.cold, None, times.filter(|_| reply.ok))
                }
                Ok(Err(e)) => (
                    false,
                    false,
                    e.downcast_ref::<Overloaded>().map(|e| e.waited),
                    None,
                ),
                Err(_) => (false, false, None, None),
            };
            let _ = tx.send(Record {
                latency: sent.elapsed(),
                ok,
                cold,
                inference,
                critical,
                shed,
                ttft: times.map(|(ttft, _)| ttft),
                tpot: times.and_then(|(_, tpot)| tpot),
            });
        });
    }
    drop(tx);
    let mut records = Vec::with_capacity(n);
    while let Some(record) = rx.recv().await {
        records.push(record);
    }
    records
}

/// The request for `planned`: a KServe v2 inference or update, or with
/// `stream` (inference only) a streamed chat completion.
fn build_request(planned: &Planned, stream: bool) -> http::Request<Full<Bytes>> {
    let urgency = if planned.critical {
        "critical"
    } else {
        "normal"
    };
    if stream && !planned.update {
        return stream::request(planned, urgency);
    }
    let kind = if planned.update {
        "update"
    } else {
        "inference"
    };
    http::Request::post(protocol::infer_path(&planned.model))
        .header("x-model-id", planned.model.as_str())
        .header("x-request-kind", kind)
        .header("x-urgency", urgency)
        .header("content-type", "application/json")
        .body(Full::from(
            r#"{"inputs":[{"name":"input0","datatype":"FP32","shape":[1],"data":[1.0]}]}"#,
        ))
        .expect("a valid request")
}

/// Breaker trips of every backend but the one the scenario faults: a
/// healthy server's breaker has no reason to open.
fn healthy_trips(handle: &BalancerHandle) -> u64 {
    let faulty = format!("sim-{FAULTY}");
    handle
        .backends()
        .iter()
        .filter(|b| b.id.as_str() != faulty)
        .map(|b| b.breaker_trips)
        .sum()
}
