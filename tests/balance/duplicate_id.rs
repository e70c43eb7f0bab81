//! A backend ID given twice: refused in the first backend set, ignored and
//! counted afterwards; an insert under a live key still replaces.

use crate::balancer_fleet;
use crate::until;

use futures_util::stream;
use tower::discover::{Change, ServiceList};
use tower::ServiceExt;
use tower_model_balance::backend::{Backend, BackendId};
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
use tower_model_balance::error::{BoxError, DuplicateBackend};

use balancer_fleet::{channel_discover, fleet, infer};
use until::until;

fn ids(balancer: &ModelBalancer<crate::held::Mock>) -> Vec<String> {
    let mut ids: Vec<_> = balancer
        .handle()
        .backends()
        .iter()
        .map(|b| b.id.to_string())
        .collect();
    ids.sort();
    ids
}

#[tokio::test(start_paused = true)]
async fn an_id_given_twice_in_the_first_list_is_refused_naming_it() {
    let f = fleet(2);
    let gpu =
        |name: &str, i: usize| Backend::new(BackendId::new(name).unwrap(), f.mocks[i].clone());
    // The README's first recipe, with one origin pasted twice.
    let backends = vec![gpu("gpu-0", 0), gpu("gpu-1", 1), gpu("gpu-0", 1)];
    let result = ModelBalancer::new(ServiceList::new(backends), BalanceConfig::default());
    let error: BoxError = match result {
        Ok(balancer) => panic!(
            "accepted: {} backends, {} ignored",
            balancer.handle().backends().len(),
            balancer.handle().stats().ignored_backends
        ),
        Err(error) => error,
    };
    assert!(error.is::<DuplicateBackend>(), "{error}");
    let duplicate = error.downcast_ref::<DuplicateBackend>().unwrap();
    assert_eq!(duplicate.id.as_str(), "gpu-0");
    assert!(error.to_string().contains("`gpu-0`"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn one_key_inserted_twice_in_the_first_batch_is_a_replacement() {
    let f = fleet(2);
    let gpu =
        |name: &str, i: usize| Backend::new(BackendId::new(name).unwrap(), f.mocks[i].clone());
    let changes = [
        Change::Insert(0, gpu("gpu-0", 0)),
        Change::Insert(0, gpu("gpu-1", 1)),
    ];
    let changes = stream::iter(changes.map(Ok::<_, std::convert::Infallible>));
    let balancer = ModelBalancer::new(changes, BalanceConfig::default()).expect("not a duplicate");
    assert_eq!(ids(&balancer), ["gpu-1"]);
    assert_eq!(balancer.handle().stats().ignored_backends, 0);
}

#[tokio::test(start_paused = true)]
async fn later_a_live_key_is_replaced_and_its_id_under_another_key_ignored_and_counted() {
    let f = fleet(2);
    let gpu = |i: usize| Backend::new(BackendId::new("gpu-0").unwrap(), f.mocks[i].clone());
    let (tx, changes) = channel_discover();
    let balancer = ModelBalancer::new(changes, BalanceConfig::default()).unwrap();
    let handle = balancer.handle();
    tx.send(Change::Insert("a", gpu(0))).unwrap();
    until(|| handle.backends().len() == 1).await;
    drop(balancer.clone().oneshot(infer("m")).await.unwrap());
    assert_eq!((f.served("a"), f.served("b")), (1, 0));

    // The same key with another endpoint: a replacement, as tower means it;
    // then the ID under another key, once the balancer runs: ignored and
    // counted (one batch, applied in order), and the balancer keeps serving.
    tx.send(Change::Insert("a", gpu(1))).unwrap();
    tx.send(Change::Insert("b", gpu(0))).unwrap();
    until(|| handle.stats().ignored_backends == 1).await;
    assert_eq!(ids(&balancer), ["gpu-0"]);
    drop(balancer.clone().oneshot(infer("m")).await.unwrap());
    assert_eq!(
        (f.served("a"), f.served("b")),
        (1, 1),
        "the replacement's endpoint serves"
    );
}
