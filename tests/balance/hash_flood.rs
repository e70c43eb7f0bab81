//! Hash flooding: model IDs crafted so that one backend owns them all
//! cannot push that backend past the bounded-load cap. Each crafted model
//! is new (cold everywhere, no demand), so loading it elsewhere costs what
//! loading it on its owner would.
//!
//! Not covered: an ID that shares the demand bucket of a model in demand
//! (4,096 buckets: about 1.2% of random IDs beside 50 models in use, or
//! crafted) passes as in demand and, cold, waits on its owner as that
//! model's cold requests do. Guarding those too (spilling every cold
//! request whose owners are at the cap) costs the fleet example's seeds 2
//! and 3 their latency: mean 41 → 310 and 550 ms, second copies evicting
//! working sets.

use futures_util::stream;
use tower::discover::Change;
use tower_model_balance::backend::{Backend, BackendId};
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
use tower_model_balance::route::{ModelId, RouteInfo};

const BACKENDS: u32 = 8;
const C: f64 = 1.25;
/// The balancer's demand table: a model's demand is its bucket's,
/// `hash64 % 4096` (src/balance/demand.rs).
const DEMAND_BUCKETS: u64 = 4096;

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn crafted_ids_owned_by_one_backend_do_not_push_it_past_the_cap() {
    let backends = (0..BACKENDS).map(|i| {
        let id = BackendId::new(&format!("gpu-{i}")).unwrap();
        Ok::<_, std::convert::Infallible>(Change::Insert(i, Backend::new(id, i)))
    });
    let config = BalanceConfig::builder().load_factor(C).build().unwrap();
    let mut balancer = ModelBalancer::new(stream::iter(backends), config).unwrap();
    let handle = balancer.handle();
    let victim = BackendId::new("gpu-3").unwrap();

    // Honest models, owned elsewhere: the victim's load is the flood's.
    let honest: Vec<RouteInfo> = (0..)
        .map(|i| ModelId::new(&format!("honest-{i}")).unwrap())
        .filter(|m| !handle.owners(m).contains(&victim))
        .take(50)
        .map(RouteInfo::new)
        .collect();
    let honest_buckets: Vec<u64> = honest
        .iter()
        .map(|r| r.model.hash64() % DEMAND_BUCKETS)
        .collect();

    // The attacker's IDs: every one owned by the victim alone (and none in
    // an honest model's demand bucket: those pass as that model, the gap
    // the module docs name).
    let crafted: Vec<ModelId> = (0..)
        .map(|i| ModelId::new(&format!("flood-{i}")).unwrap())
        .filter(|m| handle.owners(m) == [victim.clone()])
        .filter(|m| !honest_buckets.contains(&(m.hash64() % DEMAND_BUCKETS)))
        .take(400)
        .collect();

    // A fleet in service: honest traffic has warmed the demand table up (a
    // balancer's first 64 sampled requests, when every model is new, are
    // not guarded).
    let now = tokio::time::Instant::now();
    for i in 0..1000 {
        let honest = &honest[i % honest.len()];
        let picked = balancer.pick_at(honest, now).unwrap();
        picked
            .guard
            .finish_at(tower_model_balance::classify::Outcome::Success, now);
    }

    // Held in flight, one after another, with some honest traffic beside.
    let mut held = Vec::new();
    for (i, model) in crafted.iter().enumerate() {
        held.push(balancer.pick_at(&honest[i % honest.len()], now).unwrap());
        held.push(
            balancer
                .pick_at(&RouteInfo::new(model.clone()), now)
                .unwrap(),
        );
        let total = handle.in_flight();
        let cap = (C * total as f64 / f64::from(BACKENDS)).ceil() as usize;
        let on_victim = handle
            .backends()
            .into_iter()
            .find(|b| b.id == victim)
            .unwrap()
            .in_flight;
        assert!(
            on_victim <= cap,
            "after {} crafted IDs the victim holds {on_victim} of {total} in flight, cap {cap}",
            i + 1
        );
    }
    assert_eq!(handle.in_flight(), 800);
}
