//! Backends the picks could starve or flood: one slow once and idle since,
//! one that joins during a burst, a fleet whose every backend is unhealthy.
//! Pick API on Tokio's paused clock; the balancer's health task runs on it.

use crate::lcg;
use crate::paused_picks;

use std::time::Duration;

use std::convert::Infallible;

use futures_util::stream;
use tower::discover::{Change, Discover};
use tower_model_balance::backend::{Backend, BackendId};
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
use tower_model_balance::health::probe::ProbeReport;
use tower_model_balance::route::{ModelId, RouteInfo};

use lcg::Lcg;
use paused_picks::{finish_all, run_for, update, ANSWER};

/// A discovery source that has `names` ready and ends.
fn backends(
    names: &[&str],
) -> impl Discover<Key = usize, Service = Backend<String>, Error = Infallible> + Send + 'static {
    let changes: Vec<_> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let backend = Backend::new(BackendId::new(n).unwrap(), n.to_string());
            Ok(Change::Insert(i, backend))
        })
        .collect();
    stream::iter(changes)
}

/// One slow answer (a long generation, a cold load) raises a backend's
/// latency estimate a hundredfold. Idle since, it is still picked again
/// within the documented bound: the estimate relaxes toward the fleet's
/// median with the latency decay (10 s), and under a burst (5 requests
/// in flight on each rival) P2C takes it once it is within 5× the
/// median: `10 s × ln(3 994 / 120) ≈ 35 s`, plus a health interval.
#[tokio::test(start_paused = true)]
async fn a_backend_slow_once_gets_traffic_again_in_bounded_time() {
    let config = BalanceConfig::default();
    let mut balancer = ModelBalancer::from_rng(backends(&["a", "b", "c"]), config, Lcg(7)).unwrap();
    // Every estimate learns the normal answer.
    for _ in 0..60 {
        let picked = balancer.pick(&update()).unwrap();
        finish_all(vec![picked], ANSWER);
    }
    // One answer from `a` takes 20 s.
    let slow = loop {
        let picked = balancer.pick(&update()).unwrap();
        if picked.backend().as_str() == "a" {
            break picked;
        }
        finish_all(vec![picked], ANSWER);
    };
    finish_all(vec![slow], Duration::from_secs(20));

    // Bursts of 10 requests held at once, one a second.
    let mut first_back = None;
    for second in 0..60u32 {
        let burst: Vec<_> = (0..10).map(|_| balancer.pick(&update()).unwrap()).collect();
        let on_a = burst.iter().filter(|p| p.backend().as_str() == "a").count();
        finish_all(burst, ANSWER);
        if on_a > 0 {
            first_back = Some(second);
            break;
        }
        run_for(Duration::from_secs(1)).await;
    }
    let second = first_back.expect("the backend slow once was never picked again in 60 s");
    assert!(
        (30..=37).contains(&second),
        "picked again after {second} s, outside the bound"
    );
}

/// Ten backends through a channel: nine when the balancer is built, the
/// tenth (`new`) joining the running fleet; `held` requests already in
/// flight on each of the nine when it joins. Returns the share of a
/// 100-request burst (held at once, right after the join) the new backend
/// takes, over its fair share (a tenth).
async fn share_of_burst(held: usize) -> f64 {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let source = stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|c| (Ok::<_, Infallible>(c), rx))
    });
    let insert = |i: usize, name: String| {
        let backend = Backend::new(BackendId::new(&name).unwrap(), name);
        Change::Insert(i, backend)
    };
    for i in 0..9 {
        tx.send(insert(i, format!("old-{i}"))).unwrap();
    }
    let mut balancer = ModelBalancer::from_rng(source, BalanceConfig::default(), Lcg(3)).unwrap();
    let handle = balancer.handle();
    assert_eq!(handle.backends().len(), 9);
    // Steady traffic: every estimate learns the normal answer.
    for _ in 0..200 {
        let picked = balancer.pick(&update()).unwrap();
        finish_all(vec![picked], ANSWER);
    }
    run_for(Duration::from_secs(2)).await;
    let mut in_flight = Vec::new();
    while in_flight.len() < 9 * held {
        in_flight.push(balancer.pick(&update()).unwrap());
    }
    tx.send(insert(9, "new".to_string())).unwrap();
    for _ in 0..1_000 {
        if handle.backends().len() == 10 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(handle.backends().len(), 10, "the new backend joined");
    let burst: Vec<_> = (0..100)
        .map(|_| balancer.pick(&update()).unwrap())
        .collect();
    let on_new = burst
        .iter()
        .filter(|p| p.backend().as_str() == "new")
        .count();
    on_new as f64 / 10.0
}

/// A backend that joins takes between a fifth and six fifths of its fair
/// share of the next burst: not starved by its warm-up's starting weight
/// when the fleet was idle (it then competes with backends as idle as it
/// is), not flooded when the fleet was busy (its empty queue against
/// theirs).
#[tokio::test(start_paused = true)]
async fn a_backend_that_joins_takes_its_share_of_the_next_burst() {
    let idle = share_of_burst(0).await;
    let busy = share_of_burst(5).await;
    if std::env::var_os("SHOW_SHARES").is_some() {
        eprintln!("shares: idle {idle:.2}, busy {busy:.2}");
    }
    assert!(
        idle >= 0.2,
        "idle fleet: {idle:.2} of the fair share (starved)"
    );
    assert!(idle <= 1.2, "idle fleet: {idle:.2} of the fair share");
    assert!(busy >= 0.2, "busy fleet: {busy:.2} of the fair share");
    assert!(
        busy <= 1.2,
        "busy fleet: {busy:.2} of the fair share (flooded)"
    );
}

/// Every backend failing its probes: the ejection cap (30%) keeps seven
/// of ten in, but a backend kept in only by the cap counts as unhealthy
/// for the panic threshold (as in Envoy), so the balancer panics and
/// spreads the traffic over every backend instead of piling it onto the
/// seven.
#[tokio::test(start_paused = true)]
async fn with_every_backend_unhealthy_the_traffic_spreads_in_panic_mode() {
    let names: Vec<String> = (0..10).map(|i| format!("gpu-{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut balancer =
        ModelBalancer::from_rng(backends(&names), BalanceConfig::default(), Lcg(11)).unwrap();
    let handle = balancer.handle();
    let mut not_ready = ProbeReport::default();
    not_ready.ready = Some(false);
    for _ in 0..5 {
        for name in &names {
            for _ in 0..20 {
                let id = BackendId::new(name).unwrap();
                assert!(handle.report_probe(&id, Ok(&not_ready)));
            }
        }
        run_for(Duration::from_secs(1)).await;
    }
    let status = handle.backends();
    assert!(
        status.iter().all(|b| b.health < 0.2),
        "every backend unhealthy: {:?}",
        status.iter().map(|b| b.health).collect::<Vec<_>>()
    );
    assert_eq!(status.iter().filter(|b| b.ejected).count(), 3, "the cap");

    let mut on = std::collections::HashMap::new();
    for i in 0..400 {
        let route = match i % 2 {
            0 => update(),
            _ => RouteInfo::new(ModelId::new(&format!("model-{i}")).unwrap()),
        };
        let picked = balancer.pick(&route).unwrap();
        *on.entry(picked.backend().to_string()).or_insert(0) += 1;
        finish_all(vec![picked], ANSWER);
    }
    let stats = handle.stats();
    assert_eq!(stats.panic, 400, "every pick in panic mode: {stats:?}");
    assert_eq!(on.len(), 10, "spread over every backend: {on:?}");
}
