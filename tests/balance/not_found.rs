//! What a backend's 404 makes the balancer forget (issue 51): only a 404
//! whose body says the model is absent. A missing version or route, or a
//! 404 dropped unread, leaves the model resident: no reload, no churn.

use crate::placement_fleet;

use std::time::Duration;

use tower::ServiceExt;
use tower_model_balance::backend::BackendId;
use tower_model_balance::placement::WaitedForLoad;
use tower_model_balance::route::ModelId;

use placement_fleet::{burst, owner, placed, policy, read, request_to};

#[tokio::test(start_paused = true)]
async fn a_404_for_a_missing_version_or_route_forgets_nothing() {
    let (fleet, balancer, _task) = placed(4, policy());
    tokio::time::sleep(Duration::from_millis(10)).await;
    let owner = owner(&balancer, "m6");
    let resident = || {
        let (id, m6) = (BackendId::new(&owner).unwrap(), ModelId::new("m6").unwrap());
        balancer.handle().is_resident(&id, &m6)
    };
    let answer = burst(&balancer, "m6", 1).await.pop().unwrap().unwrap();
    assert_eq!(answer.status(), 200);
    assert!(resident());

    for path in ["/v2/models/m6/versions/3/infer", "/nope"] {
        let answer = balancer
            .clone()
            .oneshot(request_to(path, "m6"))
            .await
            .unwrap();
        let answer = read(answer).await;
        assert_eq!(answer.status(), 404, "{path}: {}", answer.body());
        assert!(resident(), "{path}: still resident");
    }
    let stats = balancer.handle().placement_stats().unwrap();
    assert_eq!((stats.reloads, stats.loads), (0, 1), "no reload");
    // The next request is warm: nothing was unloaded or reloaded.
    let answer = burst(&balancer, "m6", 1).await.pop().unwrap().unwrap();
    assert!(answer.extensions().get::<WaitedForLoad>().is_none());
    assert_eq!(fleet.load_calls(&owner, "m6"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_404_dropped_unread_forgets_nothing_and_one_read_does() {
    let (fleet, balancer, _task) = placed(4, policy());
    tokio::time::sleep(Duration::from_millis(10)).await;
    let owner = owner(&balancer, "m7");
    burst(&balancer, "m7", 1).await;
    // Past the least gap between two loads of a model on a backend.
    tokio::time::advance(Duration::from_secs(2)).await;
    fleet.with(&owner, |s| s.loaded.remove("m7"));
    // A retry elsewhere drops the 404 unread: it says nothing.
    let unread = balancer.clone().oneshot(request_to("/infer", "m7")).await;
    assert_eq!(unread.unwrap().status(), 404);
    assert_eq!(balancer.handle().placement_stats().unwrap().reloads, 0);
    // Read to its end, it says the model is absent: one reload.
    let found = burst(&balancer, "m7", 1).await.pop().unwrap().unwrap();
    assert_eq!(found.status(), 404);
    assert_eq!(balancer.handle().placement_stats().unwrap().reloads, 1);
}
