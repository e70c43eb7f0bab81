//! The owner plan (`balance/state/assign.rs`): with every backend holding
//! one model, two models whose ring walks start at the same backend are
//! planned apart once they are in demand, and their picks follow the plan
//! — the ring alone sends both to the backend they share, which would
//! evict one for the other for ever. And the handle names a model's
//! owners as its picks take them, between two plans too.

use crate::lcg;
use crate::pick_api;

use std::time::Duration;

use tower::discover::ServiceList;
use tower_model_balance::backend::{Backend, BackendMeta};
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};

use lcg::Lcg;
use pick_api::{id, inference, model, pick, walk, Named};

const NAMES: [&str; 4] = ["a", "b", "c", "d"];

/// Two model names whose walks start at the same backend.
fn sharing_a_first_owner() -> (String, String) {
    let names: Vec<String> = (0..).map(|i| format!("m{i}")).take(64).collect();
    for (i, x) in names.iter().enumerate() {
        for y in &names[i + 1..] {
            if walk(&NAMES, x)[0] == walk(&NAMES, y)[0] {
                return (x.clone(), y.clone());
            }
        }
    }
    unreachable!("64 models over 4 backends share first owners");
}

#[tokio::test(start_paused = true)]
async fn two_models_sharing_a_ring_owner_are_planned_apart() {
    let (x, y) = sharing_a_first_owner();
    let list = NAMES.map(|name| {
        let meta = BackendMeta::new(id(name)).with_model_slots(1).unwrap();
        Backend::with_meta(meta, Named(name))
    });
    // One owner each, and a cap too high to bind: the picks go to owners.
    let config = BalanceConfig::builder()
        .owners(1)
        .load_factor(100.0)
        .build()
        .unwrap();
    let mut balancer = ModelBalancer::from_rng(ServiceList::new(list), config, Lcg(1)).unwrap();
    let handle = balancer.handle();
    let shared = vec![id(walk(&NAMES, &x)[0])];
    assert_eq!(
        handle.owners(&model(&x)),
        shared,
        "the ring's, before demand"
    );
    assert_eq!(handle.owners(&model(&y)), shared);
    // Demand: one request in four is counted, 200 of these for each model.
    for i in 0..800 {
        let m = if i % 2 == 0 { &x } else { &y };
        drop(pick(&mut balancer, &inference(m)));
    }
    // The plan is made every 250 ms.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (ox, oy) = (handle.owners(&model(&x)), handle.owners(&model(&y)));
    assert_eq!((ox.len(), oy.len()), (1, 1));
    assert_ne!(ox, oy, "a backend of one model slot owns one model");
    assert!(
        ox == shared || oy == shared,
        "one keeps the backend: {ox:?} {oy:?}"
    );
    // And the picks follow the plan.
    for (m, owners) in [(&x, &ox), (&y, &oy)] {
        for _ in 0..4 {
            let picked = pick(&mut balancer, &inference(m));
            assert_eq!(picked.backend(), &owners[0], "{m}");
        }
    }
}

/// `BalancerHandle::owners` reports the owners a pick takes: between two
/// plans (every 250 ms) demand may already give a model more owners than
/// its plan, and the picks keep the plan's count until the next one.
#[tokio::test(start_paused = true)]
async fn the_handle_reports_the_owners_a_pick_takes_between_plans() {
    let list = NAMES.map(|name| Backend::new(id(name), Named(name)));
    // A cap too high to bind (every pick goes to an owner), an owner
    // carrying the default 1.25× the mean load.
    let config = BalanceConfig::builder()
        .load_factor(100.0)
        .owner_load(1.25)
        .build()
        .unwrap();
    let mut balancer = ModelBalancer::from_rng(ServiceList::new(list), config, Lcg(1)).unwrap();
    let handle = balancer.handle();
    // Eight models of equal demand: one owner each, and planned so (in
    // 8 of the fleet's 16 model slots).
    let models: Vec<String> = (0..8).map(|i| format!("m{i}")).collect();
    for i in 0..1600 {
        drop(pick(&mut balancer, &inference(&models[i % 8])));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let hot = &models[0];
    let planned = handle.owners(&model(hot));
    assert_eq!(planned.len(), 1, "{planned:?}");
    // Then the hot model alone, with no time for a new plan: demand wants
    // a second owner, the picks still take the plan's one.
    for _ in 0..4000 {
        drop(pick(&mut balancer, &inference(hot)));
    }
    for _ in 0..16 {
        let picked = pick(&mut balancer, &inference(hot));
        assert_eq!(picked.backend(), &planned[0]);
    }
    assert_eq!(
        handle.owners(&model(hot)),
        planned,
        "as the picks take them"
    );
    // The next plan gives it the second owner demand asks for.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let grown = handle.owners(&model(hot));
    assert_eq!(grown.len(), 2, "{grown:?}");
    assert_eq!(grown[0], planned[0], "an owner kept");
}
