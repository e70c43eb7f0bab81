//! Placement's bounds on a paused clock (issue 51): a backend whose
//! repository was never read loads nothing, however many names arrive; a
//! backend queues at most 8 loads; a model loads at most 3 times a
//! minute on one backend.

use crate::placement_fleet;

use std::time::Duration;

use tower_model_balance::error::ModelLoadFailed;

use placement_fleet::{burst, owner, placed, policy, Fleet, Loader, Loads, REPOSITORY};

/// The reason of a request that failed with `ModelLoadFailed`.
fn reason(answer: &placement_fleet::Answer) -> String {
    let error = answer.as_ref().expect_err("refused");
    let error = error.downcast_ref::<ModelLoadFailed>().expect("typed");
    error.reason.clone()
}

#[tokio::test(start_paused = true)]
async fn a_backend_whose_repository_was_never_read_loads_nothing() {
    let fleet = Fleet::new(&["gpu-a"], &REPOSITORY);
    fleet.with("gpu-a", |s| s.index_down = true);
    let balancer = fleet.balancer(&["gpu-a"], 4);
    let _task = balancer
        .handle()
        .enable_placement(Loader(fleet.clone()), policy())
        .unwrap();

    // Names the repository lists and names it does not, 200 of them.
    let mut answers = Vec::new();
    for i in 0..200 {
        let name = if i < 12 {
            format!("m{i}")
        } else {
            format!("x{i}")
        };
        answers.extend(burst(&balancer, &name, 1).await);
    }
    for answer in &answers {
        assert!(
            reason(answer).contains("was not read"),
            "{}",
            reason(answer)
        );
    }
    let stats = balancer.handle().placement_stats().unwrap();
    assert_eq!(stats.loads, 0, "no load started, so no task, no entry");
    assert_eq!(fleet.total_load_calls(), 0);
    assert_eq!(fleet.with("gpu-a", |s| s.served), 0, "nothing sent");

    // Once the repository is read, the models it lists load.
    fleet.with("gpu-a", |s| s.index_down = false);
    tokio::time::advance(Duration::from_secs(30)).await;
    let ok = burst(&balancer, "m3", 1).await.pop().unwrap().unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(fleet.total_load_calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_backend_queues_at_most_eight_loads() {
    let fleet = Fleet::new(&["gpu-a"], &REPOSITORY);
    fleet.with("gpu-a", |s| s.loads = Loads::Hang);
    let balancer = fleet.balancer(&["gpu-a"], 16);
    let _task = balancer
        .handle()
        .enable_placement(Loader(fleet.clone()), policy())
        .unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;

    // Twelve known models at once: eight loads queue, four fail at once.
    let mut tasks = tokio::task::JoinSet::new();
    for model in REPOSITORY {
        let b = balancer.clone();
        tasks.spawn(async move { burst(&b, model, 1).await.pop().unwrap() });
    }
    let answers = tasks.join_all().await;
    let busy = answers
        .iter()
        .filter(|a| reason(a).contains("8 loads already"))
        .count();
    assert_eq!(busy, 4, "past eight, refused");
    let stats = balancer.handle().placement_stats().unwrap();
    assert_eq!((stats.loads, stats.loads_limited), (8, 4));
}

#[tokio::test(start_paused = true)]
async fn a_model_loads_at_most_three_times_a_minute_on_a_backend() {
    let (fleet, balancer, _task) = placed(4, policy());
    tokio::time::sleep(Duration::from_millis(10)).await;
    let owner = owner(&balancer, "m5");
    // Loaded, then dropped behind the balancer's back, again and again:
    // each 404 starts a reload, until the third load in the minute.
    for round in 0..4 {
        let answers = burst(&balancer, "m5", 1).await;
        let loads = fleet.load_calls(&owner, "m5");
        if round < 3 {
            assert!(answers[0].as_ref().is_ok_and(|r| r.status() == 200));
            assert_eq!(loads, round + 1);
        } else {
            assert!(reason(&answers[0]).contains("3 loads of this model"));
            assert_eq!(loads, 3, "no fourth load within the minute");
        }
        fleet.with(&owner, |s| s.loaded.remove("m5"));
        let found = burst(&balancer, "m5", 1).await.pop().unwrap();
        if round < 2 {
            assert_eq!(found.unwrap().status(), 404, "the request that found out");
        }
    }
    assert!(balancer.handle().placement_stats().unwrap().loads_limited >= 1);
    // A minute on, it loads again.
    tokio::time::advance(Duration::from_secs(60)).await;
    let answers = burst(&balancer, "m5", 1).await;
    assert!(answers[0].as_ref().is_ok_and(|r| r.status() == 200));
    assert_eq!(fleet.load_calls(&owner, "m5"), 4);
}
