//! One run: a fresh fleet, the router in front of it, the plan at one
//! rate, the figures; and the search for a router's highest sustained
//! rate, a fresh run per step.

use std::net::SocketAddr;
use std::time::Duration;

use tower_model_balance_sim::{ModelServer, ServerConfig, ServerStats};

use crate::cpu;
use crate::drive::{self, Target};
use crate::load::Workload;
use crate::prefix::{self, Route};
use crate::report::{self, Figures, MaxRate};
use crate::router::{self, Kind, Programs};

/// What every run shares.
#[derive(Debug, Clone)]
pub struct Setup {
    pub backends: usize,
    pub seed: u64,
    pub programs: Programs,
    /// `/proc`'s clock ticks per second.
    pub ticks: u64,
    /// What each run sends.
    pub workload: Workload,
}

/// A run's plan, of either workload.
enum Plan {
    Plain(Vec<tower_model_balance_eval::workload::Planned>),
    Prefix(tower_model_balance_eval::prefix_workload::Workload),
}

/// `kind` in front of a fresh fleet, sent the plan of `duration` at
/// `rate`; `label` names its log file.
pub async fn run(
    setup: &Setup,
    kind: &Kind,
    rate: f64,
    duration: Duration,
    label: &str,
) -> Result<Figures, String> {
    // Plain: every server with the simulated defaults (5 resident models,
    // 4 requests at once, 300 ms cold loads, 5..=30 ms per model by seed
    // 0); none holds a model yet. Prefix: the prefix workload's servers
    // (a prefix cache, 64 requests at once), its one model loaded.
    let (config, plan) = match setup.workload {
        Workload::Plain => (
            ServerConfig::default(),
            Plan::Plain(drive::plan(rate, duration, setup.seed)),
        ),
        Workload::Prefix => {
            let work = prefix::plan(rate, duration, setup.seed);
            let config =
                tower_model_balance_eval::prefix_workload::server_config(work.cache_tokens());
            (config, Plan::Prefix(work))
        }
    };
    let mut servers = Vec::with_capacity(setup.backends);
    for i in 0..setup.backends {
        let server = ModelServer::start(&format!("sim-{i}"), config.clone())
            .await
            .map_err(|e| format!("starting simulated server sim-{i}: {e}"))?;
        servers.push(server);
    }
    if let Plan::Prefix(_) = plan {
        prefix::warm(&servers).await;
    }
    let addrs: Vec<SocketAddr> = servers.iter().map(ModelServer::addr).collect();
    let running = match kind {
        Kind::Direct => None,
        _ => Some(router::start(kind, &addrs, &setup.programs, setup.workload, label).await?),
    };
    let before: Vec<ServerStats> = servers.iter().map(ModelServer::stats).collect();
    let cpu_time = |r: &router::Running| cpu::tree_time(r.pid, setup.ticks);
    let cpu_before = running.as_ref().and_then(cpu_time);
    let records = match &plan {
        Plan::Plain(plan) => {
            let slots = config.resident_slots();
            let target = match &running {
                Some(running) if *kind == Kind::BareOracle => {
                    Target::steered(running.addr, &addrs, slots, plan)
                }
                Some(running) => Target::Router(running.addr),
                None => Target::direct(&addrs, slots, plan),
            };
            drive::drive(&target, plan).await
        }
        Plan::Prefix(work) => {
            let route = match &running {
                Some(running) => Route::Router(running.addr),
                None => Route::Direct(addrs.clone()),
            };
            prefix::drive(&route, work).await
        }
    };
    let cpu_after = running.as_ref().and_then(cpu_time);
    let cpu = match (cpu_before, cpu_after) {
        (Some(before), Some(after)) => Some(after.saturating_sub(before)),
        _ => None,
    };
    if let Some(running) = running {
        running.stop().await;
    }
    let after: Vec<ServerStats> = servers.iter().map(ModelServer::stats).collect();
    let loads: Vec<u64> = after
        .iter()
        .zip(&before)
        .map(|(a, b)| a.work.saturating_sub(b.work))
        .collect();
    let total = |count: fn(&ServerStats) -> u64| -> u64 {
        after
            .iter()
            .zip(&before)
            .map(|(a, b)| count(a).saturating_sub(count(b)))
            .sum()
    };
    let (model_loads, evictions) = (total(|s| s.cold_loads), total(|s| s.evictions));
    for server in servers {
        server.stop().await;
    }
    let mut figures = report::figures(&kind.to_string(), rate, &records, &loads, cpu);
    figures.set_loads(model_loads, evictions);
    if let Plan::Prefix(_) = plan {
        figures.prefix_hit = prefix::hit_rate(&before, &after);
    }
    if let Some(warning) = figures.lag_warning() {
        eprintln!("{warning}");
    }
    Ok(figures)
}

/// The rate the search starts from, requests per second.
const FIRST: f64 = 50.0;
/// The most the search tries.
const CEILING: f64 = 12_800.0;
/// The lowest it halves down to.
const FLOOR: f64 = 6.25;
/// Bisection steps once a rate failed above one that held.
const BISECTIONS: usize = 3;

/// The highest rate `kind` sustains ([`Figures::sustained`]): doubling
/// from [`FIRST`] while it holds (halving while it does not), then
/// [`BISECTIONS`] steps of bisection between the last held and the first
/// failed; each step a fresh run of `duration`.
pub async fn max_rate(setup: &Setup, kind: &Kind, duration: Duration) -> Result<MaxRate, String> {
    let held = |f: &Figures| {
        eprintln!(
            "  {kind} at {:.0} req/s: ok {:.2}%, p99 {:.1} ms, warm {:.1}%, max/mean {:.2}, loads/1k {:.1}, evictions/1k {:.1}, send lag p99 {:.2} ms: {}",
            f.rate,
            f.ok * 100.0,
            f.p99_ms,
            f.warm_hit * 100.0,
            f.max_mean,
            f.loads_per_1k,
            f.evictions_per_1k,
            f.lag_p99_ms,
            if f.sustained() { "held" } else { "failed" }
        );
        f.sustained()
    };
    let label = |rate: f64| format!("{}-search-{rate:.0}", kind.to_string().replace(' ', "-"));
    let (mut low, mut high) = (None::<f64>, None::<f64>);
    let mut rate = FIRST;
    // Doubling, or halving, until the bar is bracketed.
    loop {
        let figures = run(setup, kind, rate, duration, &label(rate)).await?;
        if held(&figures) {
            low = Some(rate);
            if high.is_some() || rate * 2.0 > CEILING {
                break;
            }
            rate *= 2.0;
        } else {
            high = Some(rate);
            if low.is_some() || rate / 2.0 < FLOOR {
                break;
            }
            rate /= 2.0;
        }
    }
    if let (Some(mut lo), Some(mut hi)) = (low, high) {
        for _ in 0..BISECTIONS {
            let mid = ((lo + hi) / 2.0).round();
            let figures = run(setup, kind, mid, duration, &label(mid)).await?;
            if held(&figures) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        (low, high) = (Some(lo), Some(hi));
    }
    Ok(MaxRate {
        router: kind.to_string(),
        rate: low,
        failed_at: high,
    })
}
