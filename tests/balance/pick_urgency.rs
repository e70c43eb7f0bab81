//! The pick API's urgency through the `Service` path: `high` and
//! `critical` against the load cap, and `high` taking the cheapest resident
//! owner where `normal` samples.

use crate::held;
use crate::lcg;
use crate::pick_api;

use std::collections::HashMap;
use std::time::Duration;

use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
use tower_model_balance::health::probe::ProbeReport;

use held::{Mock, Mocks};
use lcg::Lcg;
use pick_api::{balancer, id, model, request, send, walk};

#[tokio::test(start_paused = true)]
async fn urgency_high_and_critical_through_the_service_path() {
    const NAMES: [&str; 4] = ["a", "b", "c", "d"];
    let mocks = Mocks::new(&NAMES);
    let mut balancer = balancer(&mocks, BalanceConfig::default(), 4);
    let handle = balancer.handle();
    let owner = walk(&NAMES, "hot")[0]; // One owner while demand warms up.
    let mut held = Vec::new();
    let stats = || {
        let s = handle.stats();
        (s.cold_owner, s.resident_owner, s.spill)
    };

    // In flight: owner 1. Cap ceil(1.25 × 2 / 4) = 1: the owner is full.
    assert_eq!(
        send(&mut balancer, &mocks, request("hot", None), &mut held).await,
        owner
    );
    assert_eq!(stats(), (1, 0, 0));
    let normal = send(&mut balancer, &mocks, request("hot", None), &mut held).await;
    assert_ne!(normal, owner, "a normal request spills past the full owner");
    assert_eq!(stats(), (1, 0, 1));
    // In flight: owner 1, spill 1; cap ceil(1.25 × 3 / 4) = 1.
    let critical = request("hot", Some("critical"));
    assert_eq!(
        send(&mut balancer, &mocks, critical, &mut held).await,
        owner,
        "critical stays on the resident owner over the cap"
    );
    assert_eq!(stats(), (1, 1, 1));
    // In flight: owner 2, spill 1; cap ceil(1.25 × 4 / 4) = 2. At the same
    // moment, a normal request goes where the model is resident and there
    // is room: the backend it spilled to.
    let again = send(&mut balancer, &mocks, request("hot", None), &mut held).await;
    assert_eq!(again, normal);
    assert_eq!(stats(), (1, 1, 2));
    // In flight: owner 2, spill 2; cap ceil(1.25 × 5 / 4) = 2. High urgency
    // does not override the cap: it spills too, to a third backend.
    let high = send(
        &mut balancer,
        &mocks,
        request("hot", Some("high")),
        &mut held,
    )
    .await;
    assert!(high != owner && high != normal, "{high}");
    assert_eq!(stats(), (1, 1, 3));
    let critical = request("hot", Some("critical"));
    assert_eq!(
        send(&mut balancer, &mocks, critical, &mut held).await,
        owner
    );
    assert_eq!(stats(), (1, 2, 3));
    assert_eq!(mocks.served()[owner], 3);
    assert_eq!(handle.in_flight(), 6);

    // Once the load is gone, high urgency goes to the resident owner.
    held.clear();
    mocks.close_bodies();
    assert_eq!(handle.in_flight(), 0);
    let high = send(
        &mut balancer,
        &mocks,
        request("hot", Some("high")),
        &mut held,
    )
    .await;
    assert_eq!(high, owner);
    assert_eq!(stats(), (1, 3, 3));
}

/// Sends 30 requests for `steady` of `urgency` one after the other (each
/// ends before the next: loads stay equal) and counts where they went.
async fn served_by(
    balancer: &mut ModelBalancer<Mock, Lcg>,
    mocks: &Mocks,
    urgency: Option<&str>,
) -> HashMap<&'static str, usize> {
    let mut by = HashMap::new();
    for _ in 0..30 {
        let mut held = Vec::new();
        let name = send(balancer, mocks, request("steady", urgency), &mut held).await;
        *by.entry(name).or_default() += 1;
    }
    by
}

#[tokio::test(start_paused = true)]
async fn urgency_high_takes_the_cheapest_resident_owner_where_normal_samples() {
    const NAMES: [&str; 4] = ["a", "b", "c", "d"];
    let mocks = Mocks::new(&NAMES);
    let config = BalanceConfig::builder()
        .model_owners(model("steady"), 3)
        .build()
        .unwrap();
    let mut balancer = balancer(&mocks, config, 5);
    let handle = balancer.handle();
    let owners = &walk(&NAMES, "steady")[..3];
    // Owners 0 and 2 report a deep queue: their health, and with it the
    // weight their cost is divided by, drops at the next evaluation.
    let mut deep = ProbeReport::default();
    deep.load.requests_waiting = Some(40.0);
    for (i, &owner) in owners.iter().enumerate() {
        assert!(handle.set_resident_models(&id(owner), [&model("steady")]));
        if i != 1 {
            assert!(handle.report_probe(&id(owner), Ok(&deep)));
        }
    }
    // The default evaluation interval, 1 s, and a little more.
    tokio::time::sleep(Duration::from_secs(1) + Duration::from_millis(1)).await;
    let cheapest = owners[1];
    for (i, &owner) in owners.iter().enumerate() {
        let health = handle.health(&id(owner)).unwrap();
        assert_eq!(health.score < 0.8, i != 1, "{owner}: {health:?}");
    }
    let high = served_by(&mut balancer, &mocks, Some("high")).await;
    assert_eq!(high, HashMap::from([(cheapest, 30)]), "{high:?}");
    let normal = served_by(&mut balancer, &mocks, None).await;
    assert!(
        normal.keys().all(|name| owners.contains(name)),
        "{normal:?}"
    );
    assert!(
        normal.get(cheapest).copied().unwrap_or(0) < 30,
        "P2C samples: {normal:?}"
    );
    assert_eq!(handle.stats().resident_owner, 60);
}
