//! Placement's bounds on a paused clock (issue 51): a backend whose
//! repository was never read loads nothing, however many names arrive; a
//! backend queues at most 8 loads; a model loads at most once per 2 s on
//! one backend.

use crate::placement_fleet;

use std::time::Duration;

use tower_model_balance::error::ModelLoadFailed;
use tower_model_balance::placement::WaitedForLoad;

use placement_fleet::{burst, owner, placed, policy, Fleet, Loader, Loads, LOAD_TIME, REPOSITORY};

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
    // Refused at once: its read failed (a request waits for a first read
    // only while none has failed).
    for answer in &answers {
        assert!(
            reason(answer).contains("repository could not be read"),
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
async fn a_model_loads_at_most_once_per_two_seconds_on_a_backend() {
    let (fleet, balancer, _task) = placed(4, policy());
    tokio::time::sleep(Duration::from_millis(10)).await;
    let owner = owner(&balancer, "m5");
    let start = tokio::time::Instant::now();
    let loaded = burst(&balancer, "m5", 1).await.pop().unwrap().unwrap();
    assert_eq!(loaded.status(), 200);
    // Dropped behind the balancer's back at once: the 404 starts no
    // reload within the gap, and the next request waits for the gap.
    fleet.with(&owner, |s| s.loaded.remove("m5"));
    let found = burst(&balancer, "m5", 1).await.pop().unwrap().unwrap();
    assert_eq!(found.status(), 404);
    assert_eq!(balancer.handle().placement_stats().unwrap().reloads, 0);
    let again = burst(&balancer, "m5", 1).await.pop().unwrap().unwrap();
    assert_eq!(again.status(), 200);
    assert!(again.extensions().get::<WaitedForLoad>().is_some());
    assert!(
        start.elapsed() >= Duration::from_secs(2) + LOAD_TIME,
        "waited for the gap, then the load: {:?}",
        start.elapsed()
    );
    assert_eq!(fleet.load_calls(&owner, "m5"), 2);
    assert!(balancer.handle().placement_stats().unwrap().loads_limited >= 1);
}
