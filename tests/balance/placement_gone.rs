//! Placement's waits on a backend that hangs (its load calls never
//! answered), on a paused clock with a load timeout of 120 s: they end
//! once health ejects the backend, or discovery removes it — not at the
//! load timeout — and the model loads there again once it is back.

use crate::placement_fleet;

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{timeout, Instant};
use tower_model_balance::backend::{Backend, BackendId, BackendMeta};
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
use tower_model_balance::discover::Watch;
use tower_model_balance::endpoint::Origin;
use tower_model_balance::error::ModelLoadFailed;
use tower_model_balance::health::probe::{ProbeError, ProbeReport};
use tower_model_balance::placement::PlacementConfig;

use placement_fleet::{burst, owner, Answer, Endpoint, Fleet, Loader, Loads, NAMES, REPOSITORY};

const LOAD_TIMEOUT: Duration = Duration::from_secs(120);

fn policy() -> PlacementConfig {
    PlacementConfig::builder()
        .load_timeout(LOAD_TIMEOUT)
        .build()
        .unwrap()
}

/// `n` requests for `model`, waiting in a task.
fn waiting(balancer: &ModelBalancer<Endpoint>, model: &str, n: usize) -> JoinHandle<Vec<Answer>> {
    let (balancer, model) = (balancer.clone(), model.to_owned());
    tokio::spawn(async move { burst(&balancer, &model, n).await })
}

/// The reason of an answer that must be a `ModelLoadFailed`.
fn reason(answer: &Answer) -> String {
    let error = answer.as_ref().expect_err("failed");
    let error = error.downcast_ref::<ModelLoadFailed>().expect("typed");
    error.reason.clone()
}

/// Reports a probe of `id` every 200 ms, failed or not, until `done` says
/// so of the backend's health (at most 10 minutes of the paused clock).
async fn probe_until(
    balancer: &ModelBalancer<Endpoint>,
    id: &BackendId,
    answered: bool,
    done: impl Fn(bool) -> bool,
) {
    let handle = balancer.handle();
    let report = ProbeReport::default();
    let started = Instant::now();
    while !done(handle.health(id).unwrap().ejected.is_some()) {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "health never did"
        );
        let answer = match answered {
            true => Ok(&report),
            false => Err(&ProbeError::Timeout),
        };
        handle.report_probe(id, answer);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn waits_on_a_hung_backend_end_when_health_ejects_it_and_it_loads_again_once_back() {
    let fleet = Fleet::new(&NAMES, &REPOSITORY);
    let balancer = fleet.balancer(&NAMES, 4);
    let _task = balancer
        .handle()
        .enable_placement(Loader(fleet.clone()), policy())
        .unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let owner = owner(&balancer, "m3");
    let id = BackendId::new(&owner).unwrap();
    fleet.with(&owner, |s| s.loads = Loads::Hang);
    let started = Instant::now();
    let answers = waiting(&balancer, "m3", 4);

    // Its probes go unanswered: health ejects it within seconds.
    probe_until(&balancer, &id, false, |ejected| ejected).await;
    let ejected_after = started.elapsed();
    let answers = timeout(Duration::from_secs(1), answers)
        .await
        .expect("the waits end once health ejects the backend")
        .unwrap();
    println!(
        "ejected after {ejected_after:?}, every wait ended by {:?} (load timeout {LOAD_TIMEOUT:?})",
        started.elapsed()
    );
    for answer in &answers {
        assert!(
            reason(answer).contains("ejected by health"),
            "{}",
            reason(answer)
        );
    }
    assert_eq!(fleet.load_calls(&owner, "m3"), 1, "one load, cut");
    let stats = balancer.handle().placement_stats().unwrap();
    assert_eq!((stats.loads, stats.load_failures), (1, 1));
    let breaker = balancer.handle().breaker(&id).unwrap().stats();
    assert_eq!(breaker.failures, 0, "health counted it: {breaker:?}");
    assert_eq!(balancer.handle().in_flight(), 0);

    // Back: readmitted, the model loads there at once (nothing poisoned,
    // no load left running to join).
    fleet.with(&owner, |s| s.loads = Loads::Succeed);
    probe_until(&balancer, &id, true, |ejected| !ejected).await;
    let ok = burst(&balancer, "m3", 1).await.pop().unwrap().unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(fleet.load_calls(&owner, "m3"), 2);
    assert_eq!(fleet.with(&owner, |s| s.served), 1, "served by the owner");
}

#[tokio::test(start_paused = true)]
async fn waits_on_a_hung_backend_end_when_discovery_removes_it() {
    let fleet = Fleet::new(&NAMES, &REPOSITORY);
    let backend = |i: usize| {
        let addr = format!("127.0.0.1:{}", 9000 + i).parse().unwrap();
        let meta = BackendMeta::new(BackendId::new(NAMES[i]).unwrap())
            .with_address(Origin::http(addr))
            .with_model_slots(4)
            .unwrap();
        Backend::with_meta(meta, fleet.endpoint(NAMES[i]))
    };
    let (sets, set) = watch::channel((0..NAMES.len()).map(backend).collect::<Vec<_>>());
    let config = BalanceConfig::builder().owners(1).build().unwrap();
    let balancer = ModelBalancer::new(Watch::new(set), config).unwrap();
    let _task = balancer
        .handle()
        .enable_placement(Loader(fleet.clone()), policy())
        .unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let owner = owner(&balancer, "m3");
    fleet.with(&owner, |s| s.loads = Loads::Hang);
    let answers = waiting(&balancer, "m3", 4);
    tokio::time::sleep(Duration::from_secs(1)).await;

    sets.send_modify(|set| set.retain(|b| b.meta.id().as_str() != owner));
    let answers = timeout(Duration::from_secs(1), answers)
        .await
        .expect("the waits end once the backend is removed")
        .unwrap();
    for answer in &answers {
        assert!(reason(answer).contains("removed"), "{}", reason(answer));
    }
    let stats = balancer.handle().placement_stats().unwrap();
    assert_eq!(
        (stats.loads, stats.load_failures),
        (1, 1),
        "the load ended too"
    );
}
