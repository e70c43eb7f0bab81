//! On-demand placement over mock model servers in explicit mode (404 until
//! a model is loaded through the repository API), on a paused clock: one
//! load per (backend, model) however many requests wait, the allow-list,
//! failures and timeouts, the 404 reload, eviction, PreferWarm.

use crate::placement_fleet;

use std::time::Duration;

use tower_model_balance::backend::BackendId;
use tower_model_balance::error::{ModelLoadFailed, UnknownModel};
use tower_model_balance::health::probe::ProbeReport;
use tower_model_balance::placement::{PlacementConfig, WaitedForLoad, WhenCold};
use tower_model_balance::route::ModelId;

use placement_fleet::{burst, owner, placed, policy, Loader, Loads, LOAD_TIME, NAMES, REPOSITORY};

#[tokio::test(start_paused = true)]
async fn a_herd_of_requests_for_a_cold_model_makes_one_load_call() {
    let (fleet, balancer, _task) = placed(4, policy());
    let owner = owner(&balancer, "m1");

    let answers = burst(&balancer, "m1", 100).await;
    assert!(answers
        .iter()
        .all(|a| a.as_ref().is_ok_and(|r| r.status() == 200)));
    assert!(
        answers.iter().all(|a| a
            .as_ref()
            .unwrap()
            .extensions()
            .get::<WaitedForLoad>()
            .is_some()),
        "every request waited for the load: each is a cold start"
    );
    assert_eq!(fleet.load_calls(&owner, "m1"), 1, "one load for the herd");
    assert_eq!(fleet.total_load_calls(), 1);
    assert_eq!(fleet.with(&owner, |s| s.max_loading["m1"]), 1);
    assert_eq!(balancer.handle().placement_stats().unwrap().loads, 1);
    let stats = balancer.handle().stats();
    assert_eq!(
        (stats.cold_owner, stats.resident_owner),
        (100, 0),
        "each waited for the load: cold in every figure"
    );

    // Warm now: no wait, no load.
    let answers = burst(&balancer, "m1", 10).await;
    assert!(answers.iter().all(|a| {
        let r = a.as_ref().unwrap();
        r.status() == 200 && r.extensions().get::<WaitedForLoad>().is_none()
    }));
    assert_eq!(fleet.total_load_calls(), 1);
    assert_eq!(balancer.handle().in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_model_the_repository_does_not_know_is_refused_and_never_loaded() {
    let (fleet, balancer, _task) = placed(4, policy());
    // Let the first repository round finish: the allow-list is known.
    tokio::time::sleep(Duration::from_millis(10)).await;

    for answer in burst(&balancer, "not-in-repo", 5).await {
        let error = answer.unwrap_err();
        let error = error.downcast_ref::<UnknownModel>().expect("typed");
        assert_eq!(error.model.as_str(), "not-in-repo");
    }
    assert_eq!(fleet.total_load_calls(), 0, "no load triggered");
    let owner = owner(&balancer, "not-in-repo");
    assert_eq!(fleet.with(&owner, |s| s.served), 0, "nothing sent");
    assert_eq!(
        balancer.handle().placement_stats().unwrap().unknown_models,
        5
    );
    let breaker = balancer
        .handle()
        .breaker(&BackendId::new(&owner).unwrap())
        .unwrap();
    assert_eq!(breaker.stats().failures, 0, "the breaker counts nothing");
    assert_eq!(balancer.handle().in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_failed_load_fails_every_waiting_request_and_only_a_backends_fault_counts() {
    let (fleet, balancer, _task) = placed(4, policy());
    let owner = owner(&balancer, "m2");
    fleet.with(&owner, |s| s.loads = Loads::Fail);
    let breaker = || {
        balancer
            .handle()
            .breaker(&BackendId::new(&owner).unwrap())
            .unwrap()
            .stats()
    };

    let answers = burst(&balancer, "m2", 8).await;
    for answer in &answers {
        let error = answer.as_ref().unwrap_err();
        let error = error.downcast_ref::<ModelLoadFailed>().expect("typed");
        assert_eq!(
            (error.backend.as_str(), error.model.as_str()),
            (owner.as_str(), "m2")
        );
    }
    assert_eq!(
        fleet.load_calls(&owner, "m2"),
        1,
        "one load for all who waited"
    );
    assert_eq!(
        breaker().failures,
        0,
        "the server answered the load with an error: the model's failure, not the backend's"
    );
    assert_eq!(
        balancer.handle().placement_stats().unwrap().load_failures,
        1
    );
    // For a while the model fails at once there, with no new load call.
    for answer in burst(&balancer, "m2", 3).await {
        assert!(answer.unwrap_err().is::<ModelLoadFailed>());
    }
    assert_eq!(fleet.load_calls(&owner, "m2"), 1);

    // The server recovers: past the wait, the next request loads again.
    fleet.with(&owner, |s| s.loads = Loads::Succeed);
    tokio::time::advance(Duration::from_secs(5)).await;
    let answers = burst(&balancer, "m2", 3).await;
    assert!(answers
        .iter()
        .all(|a| a.as_ref().is_ok_and(|r| r.status() == 200)));
    assert_eq!(fleet.load_calls(&owner, "m2"), 2);

    // A load that hangs past its timeout is the backend's failure: one.
    let other = REPOSITORY
        .into_iter()
        .find(|&m| m != "m2" && self::owner(&balancer, m) == owner)
        .expect("another model of the owner's");
    fleet.with(&owner, |s| s.loads = Loads::Hang);
    for answer in burst(&balancer, other, 2).await {
        assert!(answer.unwrap_err().is::<ModelLoadFailed>());
    }
    let metrics = breaker();
    assert_eq!(metrics.failures, 1, "the hung load, once: {metrics:?}");
    assert_eq!(metrics.slow_calls, 0, "never a slow call");
    assert_eq!(balancer.handle().in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_load_that_hangs_fails_at_the_load_timeout() {
    let (fleet, balancer, _task) = placed(4, policy());
    let owner = owner(&balancer, "m3");
    fleet.with(&owner, |s| s.loads = Loads::Hang);

    let start = tokio::time::Instant::now();
    let answers = burst(&balancer, "m3", 4).await;
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(5),
        "the policy's load timeout"
    );
    for answer in answers {
        let error = answer.unwrap_err();
        let error = error.downcast_ref::<ModelLoadFailed>().expect("typed");
        assert!(error.reason.contains("timed out"), "{}", error.reason);
    }
    assert_eq!(balancer.handle().in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_404_for_a_model_believed_resident_starts_one_reload() {
    let (fleet, balancer, _task) = placed(4, policy());
    let owner = owner(&balancer, "m4");
    burst(&balancer, "m4", 1).await;
    assert_eq!(fleet.load_calls(&owner, "m4"), 1);
    // Past the least gap between two loads of a model on a backend.
    tokio::time::advance(Duration::from_secs(2)).await;

    // The server drops the model behind the balancer's back.
    fleet.with(&owner, |s| s.loaded.remove("m4"));
    let first = burst(&balancer, "m4", 1).await.pop().unwrap().unwrap();
    assert_eq!(first.status(), 404, "the request that found out");
    // The rest wait for the one reload rather than storm into 404s.
    let answers = burst(&balancer, "m4", 20).await;
    assert!(answers
        .iter()
        .all(|a| a.as_ref().is_ok_and(|r| r.status() == 200)));
    assert_eq!(fleet.load_calls(&owner, "m4"), 2, "one reload");
    assert_eq!(balancer.handle().placement_stats().unwrap().reloads, 1);
}

#[tokio::test(start_paused = true)]
async fn a_full_backend_unloads_a_model_it_does_not_own_to_make_room() {
    let (fleet, balancer, _task) = placed(2, policy());
    let handle = balancer.handle();
    // It owns `m0` and `owned`, and holds `owned` (least recently used)
    // and `foreign` (loaded there by another gateway, owned elsewhere); it
    // has room for two.
    let target = owner(&balancer, "m0");
    let owned = *REPOSITORY[1..]
        .iter()
        .find(|m| owner(&balancer, m) == target)
        .expect("a second model owned by the same backend");
    let foreign = *REPOSITORY
        .iter()
        .find(|m| owner(&balancer, m) != target)
        .unwrap();
    fleet.with(&target, |s| {
        s.loaded.insert(owned.to_string());
        s.loaded.insert(foreign.to_string());
    });
    let id = BackendId::new(&target).unwrap();
    let (owned_id, foreign_id) = (ModelId::new(owned).unwrap(), ModelId::new(foreign).unwrap());
    // The server's own list, as a probe reports it: `owned` first.
    let report = |models: Vec<ModelId>| {
        let mut r = ProbeReport::default();
        r.resident_models = Some(models);
        r
    };
    handle.report_probe(&id, Ok(&report(vec![owned_id.clone()])));
    tokio::time::advance(Duration::from_millis(5)).await;
    handle.report_probe(&id, Ok(&report(vec![owned_id, foreign_id])));

    let answers = burst(&balancer, "m0", 3).await;
    assert!(answers
        .iter()
        .all(|a| a.as_ref().is_ok_and(|r| r.status() == 200)));
    let unloads = fleet.with(&target, |s| s.unloads.clone());
    assert_eq!(
        unloads,
        vec![foreign.to_string()],
        "one unload, of the model it does not own (which one among several:
         the unit tests of `choose_victim`)"
    );
    assert_eq!(handle.placement_stats().unwrap().unloads, 1);
    assert!(fleet.with(&target, |s| s.loaded.contains(owned)
        && s.loaded.contains("m0")));
}

#[tokio::test(start_paused = true)]
async fn prefer_warm_serves_from_a_warm_backend_while_the_owner_loads() {
    let policy = PlacementConfig::builder()
        .when_cold(WhenCold::PreferWarm)
        .build()
        .unwrap();
    let (fleet, balancer, _task) = placed(4, policy);
    let handle = balancer.handle();
    let owner = owner(&balancer, "m5");
    let warm = NAMES.iter().find(|n| **n != owner).unwrap();
    fleet.with(warm, |s| s.loaded.insert("m5".to_string()));
    let m5 = ModelId::new("m5").unwrap();
    handle.set_resident_models(&BackendId::new(warm).unwrap(), [&m5]);

    let first = burst(&balancer, "m5", 1).await.pop().unwrap().unwrap();
    assert_eq!(first.status(), 200);
    assert!(
        first.extensions().get::<WaitedForLoad>().is_none(),
        "no wait"
    );
    assert_eq!(fleet.with(warm, |s| s.served), 1, "served warm elsewhere");
    // The owner's load started anyway; once done, the owner serves.
    tokio::time::sleep(LOAD_TIME * 2).await;
    assert_eq!(fleet.load_calls(&owner, "m5"), 1);
    assert!(handle.is_resident(&BackendId::new(&owner).unwrap(), &m5));
    for _ in 0..5 {
        burst(&balancer, "m5", 1).await;
    }
    assert_eq!(fleet.with(&owner, |s| s.served), 5, "back on the owner");
}

#[tokio::test]
async fn placement_is_enabled_once() {
    let (fleet, balancer, _task) = placed(4, policy());
    let handle = balancer.handle();
    let again = handle.enable_placement(Loader(fleet.clone()), policy());
    assert_eq!(
        again.unwrap_err().to_string(),
        "invalid config: `placement` must be enabled at most once per balancer"
    );
}

#[tokio::test(start_paused = true)]
async fn a_backend_reporting_its_gpu_memory_full_unloads_first() {
    // Room for 4 models by count: holding 1, it is not full by count.
    let (fleet, balancer, _task) = placed(4, policy());
    let handle = balancer.handle();
    let target = owner(&balancer, "m0");
    let foreign = *REPOSITORY
        .iter()
        .find(|m| owner(&balancer, m) != target)
        .unwrap();
    fleet.with(&target, |s| s.loaded.insert(foreign.to_string()));
    let id = BackendId::new(&target).unwrap();
    let report = |used: f64| {
        let mut r = ProbeReport::default();
        r.resident_models = Some(vec![ModelId::new(foreign).unwrap()]);
        r.load.gpu_memory_used_bytes = Some(used);
        r.load.gpu_memory_total_bytes = Some(100e9);
        r
    };

    let second = *REPOSITORY[1..]
        .iter()
        .find(|m| owner(&balancer, m) == target)
        .expect("a second model owned by the same backend");

    // 50% used: room, nothing unloaded.
    handle.report_probe(&id, Ok(&report(50e9)));
    burst(&balancer, "m0", 1).await;
    assert!(fleet.with(&target, |s| s.unloads.is_empty()));
    // 95% used: full, whatever the count says; the foreign model goes.
    handle.report_probe(&id, Ok(&report(95e9)));
    burst(&balancer, second, 1).await;
    let unloads = fleet.with(&target, |s| s.unloads.clone());
    assert!(unloads.contains(&foreign.to_string()), "{unloads:?}");
}
