//! Admission through the pick API: a full owner sheds rather than make a
//! cold copy of its model elsewhere; a model held nowhere still gets its
//! first copy.

use tokio::time::Instant;
use tower_model_balance::backend::{Backend, BackendId};
use tower_model_balance::balance::{AdmissionConfig, BalanceConfig, Limit, ModelBalancer};
use tower_model_balance::error::Overloaded;

fn config(admission: AdmissionConfig) -> BalanceConfig {
    BalanceConfig::builder()
        .admission(admission)
        .build()
        .unwrap()
}

/// Eight backends over the pick API, each limited to `limit` in flight.
fn picker(limit: usize) -> ModelBalancer<u32> {
    let backends = (0..8u32).map(|i| {
        let id = BackendId::new(&format!("gpu-{i}")).unwrap();
        Ok::<_, std::convert::Infallible>(tower::discover::Change::Insert(i, Backend::new(id, i)))
    });
    let admission = AdmissionConfig::builder(Limit::fixed(limit))
        .build()
        .unwrap();
    ModelBalancer::new(futures_util::stream::iter(backends), config(admission)).unwrap()
}

fn route(model: &str) -> tower_model_balance::route::RouteInfo {
    tower_model_balance::route::RouteInfo::new(
        tower_model_balance::route::ModelId::new(model).unwrap(),
    )
}

#[tokio::test(start_paused = true)]
async fn a_full_owner_sheds_rather_than_make_a_cold_copy_elsewhere() {
    let mut balancer = picker(1);
    let handle = balancer.handle();
    let now = Instant::now();
    // The model loads on its owner, and is served there.
    let first = balancer.pick_at(&route("m"), now).unwrap();
    let owner = first.backend().clone();
    first
        .guard
        .finish(tower_model_balance::classify::Outcome::Success);
    let held = balancer.pick_at(&route("m"), now).unwrap();
    assert_eq!(held.backend(), &owner, "warm on its owner");
    // The owner is full: seven idle backends, none holding the model.
    let err = match balancer.pick_at(&route("m"), now) {
        Ok(picked) => panic!("sent to {} instead of shed", picked.backend()),
        Err(err) => err,
    };
    assert!(err.is::<Overloaded>(), "{err}");
    let busy: Vec<usize> = handle.backends().iter().map(|b| b.in_flight).collect();
    assert_eq!(
        busy.iter().sum::<usize>(),
        1,
        "nothing went elsewhere: {busy:?}"
    );
    // A model held nowhere still gets its first copy.
    let other = balancer.pick_at(&route("another"), now).unwrap();
    assert_ne!(other.backend(), &owner);
    drop((held, other));
    // Room again: the owner takes it.
    let again = balancer.pick_at(&route("m"), now).unwrap();
    assert_eq!(again.backend(), &owner);
    assert_eq!(handle.stats().shed_normal, 1);
}
