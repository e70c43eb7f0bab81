//! The pick API (`ModelBalancer::pick` and its `Guard`) against the
//! `Service` path: shared state and counters, cancellation, latency into
//! P2C, and the typed error when nothing can be picked (urgency:
//! `tests/balance/pick_urgency.rs`).

use crate::lcg;
use crate::pick_api;

use std::convert::Infallible;
use std::time::Duration;

use futures_util::stream;
use tokio::time::Instant;
use tower::discover::{Change, ServiceList};
use tower::{Service, ServiceExt};
use tower_model_balance::backend::Backend;
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
use tower_model_balance::breaker::{BreakerConfig, BreakerState, Mode, Transition};
use tower_model_balance::classify::Outcome;
use tower_model_balance::error::NoHealthyBackend;
use tower_model_balance::route::{ModelId, RequestKind, RouteInfo, Urgency};

use lcg::Lcg;
use pick_api::{id, inference, model, named, pick, request, update, walk, Named};

#[tokio::test(start_paused = true)]
async fn pick_and_the_service_share_state_and_counters() {
    const NAMES: [&str; 4] = ["a", "b", "c", "d"];
    let primary = walk(&NAMES, "m")[0];
    let backends = || {
        let list = NAMES.map(|name| Backend::new(id(name), Named(name)));
        ServiceList::new(list)
    };
    // A cap too high to bind: every request for the idle model may go to
    // its primary.
    let config = BalanceConfig::builder().load_factor(100.0).build().unwrap();
    let mut balancer = ModelBalancer::from_rng(backends(), config.clone(), Lcg(1)).unwrap();
    let handle = balancer.handle();

    let first = pick(&mut balancer, &inference("m"));
    assert_eq!(first.backend().as_str(), primary);
    assert_eq!(
        first.endpoint.0, primary,
        "the endpoint of the backend picked"
    );
    assert_eq!(handle.stats().cold_owner, 1, "a first pick loads the model");
    assert_eq!(handle.in_flight(), 1, "the guard counts until finished");

    // The Service path sees the residency the pick taught, and its request
    // counts in the same in-flight total.
    let rsp = balancer
        .ready()
        .await
        .unwrap()
        .call(request("m", None))
        .await
        .unwrap();
    assert_eq!(rsp.body().get_ref(), primary);
    assert_eq!(handle.stats().resident_owner, 1);
    assert_eq!(handle.in_flight(), 2);

    let second = pick(&mut balancer, &inference("m"));
    assert_eq!(second.backend().as_str(), primary);
    assert_eq!(handle.stats().resident_owner, 2, "warm after the first");
    assert_eq!(handle.in_flight(), 3);
    let write = pick(&mut balancer, &update("index"));
    assert_eq!(handle.in_flight(), 4);
    let status = handle.backends();
    let on_primary = status.iter().find(|b| b.id.as_str() == primary).unwrap();
    assert_eq!((on_primary.picked, on_primary.in_flight), (3, 3));

    first.guard.finish(Outcome::Success);
    assert_eq!(handle.in_flight(), 3);
    drop(rsp);
    assert_eq!(handle.in_flight(), 2);
    second.guard.finish(Outcome::Failure);
    write.guard.finish(Outcome::Ignored);
    assert_eq!(handle.in_flight(), 0);

    // The same requests through the Service path alone count the same.
    let mut service = ModelBalancer::from_rng(backends(), config, Lcg(1)).unwrap();
    for req in [request("m", None), request("m", None), request("m", None)] {
        drop(service.ready().await.unwrap().call(req).await.unwrap());
    }
    let write = http::Request::post("/")
        .header("x-model-id", "index")
        .header("x-request-kind", "update")
        .body(String::new())
        .unwrap();
    drop(service.ready().await.unwrap().call(write).await.unwrap());
    let by_pick = handle.stats();
    assert_eq!((by_pick.cold_owner, by_pick.resident_owner), (1, 2));
    assert_eq!(by_pick.update, 1);
    assert_eq!(service.handle().stats(), by_pick);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_guard_is_a_cancellation_counting_nothing() {
    const NAMES: [&str; 3] = ["a", "b", "c"];
    let primary = walk(&NAMES, "m")[0];
    let open_for = Duration::from_secs(5);
    let policy = BreakerConfig::builder()
        .window(4)
        .minimum_calls(3)
        .failure_rate_threshold(0.5)
        .open_duration(open_for)
        .half_open_permits(3)
        .build()
        .unwrap();
    // A cap too high to bind, so that every probe can go to the primary.
    let config = BalanceConfig::builder()
        .breaker(policy)
        .load_factor(100.0)
        .build()
        .unwrap();
    let mut balancer = ModelBalancer::from_rng(named(&NAMES), config, Lcg(2)).unwrap();
    let handle = balancer.handle();
    let m = inference("m");
    let state = || handle.breaker_state(&id(primary), &model("m")).unwrap();

    // Failure, ten cancellations, failure, ten cancellations, failure: the
    // window holds three failures only, and trips on the third. (Had the
    // cancellations counted as successes, the rate would be 1 in 4; as
    // failures, it would have tripped at once.)
    for round in 0..3 {
        let failed = pick(&mut balancer, &m);
        assert_eq!(failed.backend().as_str(), primary);
        failed.guard.finish(Outcome::Failure);
        if round == 2 {
            break;
        }
        for _ in 0..10 {
            let cancelled = pick(&mut balancer, &m);
            assert_eq!(cancelled.backend().as_str(), primary);
            drop(cancelled);
        }
        assert_eq!(handle.stats().breaker_trips, 0, "round {round}");
        assert_eq!(state(), BreakerState::Closed);
    }
    assert_eq!(handle.stats().breaker_trips, 1);
    assert_eq!(state(), BreakerState::Open);
    assert_eq!(handle.in_flight(), 0);

    // Open: picks avoid it, inference and updates alike.
    for i in 0..50 {
        let route = if i % 2 == 0 { m.clone() } else { update("u") };
        let picked = pick(&mut balancer, &route);
        assert_ne!(picked.backend().as_str(), primary);
        assert_ne!(picked.endpoint, primary);
        picked.guard.finish(Outcome::Success);
    }

    // Half-open after the open duration: three probes, no fourth.
    tokio::time::advance(open_for).await;
    let mut probes: Vec<_> = (0..3).map(|_| pick(&mut balancer, &m)).collect();
    assert!(probes.iter().all(|p| p.backend().as_str() == primary));
    assert_eq!(state(), BreakerState::HalfOpen);
    let refused = pick(&mut balancer, &m);
    assert_ne!(refused.backend().as_str(), primary, "every probe is out");
    drop(refused);
    // A dropped probe gives its permit back: one more probe is admitted.
    drop(probes.pop());
    let probe = pick(&mut balancer, &m);
    assert_eq!(probe.backend().as_str(), primary, "the permit came back");
    drop(probe);
    // Cancelled probes decided nothing, either way.
    drop(probes);
    assert_eq!(state(), BreakerState::HalfOpen);
    assert_eq!(handle.stats().breaker_trips, 1);
    for probe in (0..3).map(|_| pick(&mut balancer, &m)).collect::<Vec<_>>() {
        assert_eq!(probe.backend().as_str(), primary);
        probe.guard.finish(Outcome::Success);
    }
    assert_eq!(state(), BreakerState::Closed, "three successful probes");
}

#[tokio::test(start_paused = true)]
async fn finish_at_records_latency_into_p2c_cost() {
    const NAMES: [&str; 2] = ["slow", "fast"];
    let latency = |name: &str| match name {
        "slow" => Duration::from_secs(1),
        _ => Duration::from_millis(5),
    };
    let mut balancer =
        ModelBalancer::from_rng(named(&NAMES), BalanceConfig::default(), Lcg(3)).unwrap();
    let handle = balancer.handle();
    let route = update("embeddings");

    // Equal costs at first; the first guard held makes the second pick go
    // to the other backend: one request on each.
    let first = pick(&mut balancer, &route);
    let second = pick(&mut balancer, &route);
    assert_ne!(first.backend(), second.backend());
    for picked in [first, second] {
        let took = latency(picked.backend().as_str());
        let end = picked.guard.started().expect("pick times every request") + took;
        picked.guard.finish_at(Outcome::Success, end);
    }

    // From now on P2C compares both backends with as many in flight (none):
    // a draw weighted by inverse cost, so the recorded latencies show as
    // the one whose estimate is lower taking nearly every request (the
    // other still gets one now and then, which keeps its estimate fresh).
    let mut fast = 0;
    for _ in 0..100 {
        let picked = pick(&mut balancer, &route);
        let name = picked.backend().as_str().to_string();
        fast += usize::from(name == "fast");
        let end = picked.guard.started().expect("pick times every request") + latency(&name);
        picked.guard.finish_at(Outcome::Success, end);
    }
    assert!(fast >= 95, "{fast} of 100 on the fast backend");
    assert_eq!(handle.stats().update, 102);
    assert_eq!(handle.in_flight(), 0);
}

#[tokio::test(start_paused = true)]
async fn no_backend_is_a_typed_error_naming_the_model() {
    let empty: Vec<Result<Change<usize, Backend<String>>, Infallible>> = Vec::new();
    let mut balancer =
        ModelBalancer::from_rng(stream::iter(empty), BalanceConfig::default(), Lcg(6)).unwrap();
    let handle = balancer.handle();
    for route in [inference("llama-3-8b"), update("llama-3-8b")] {
        let err = balancer.pick(&route).unwrap_err();
        let err = err.downcast_ref::<NoHealthyBackend>().expect("typed");
        assert_eq!(err.model.as_str(), "llama-3-8b");
        assert!(err.to_string().contains("`llama-3-8b`"), "{err}");
    }
    let stats = handle.stats();
    assert_eq!(stats.no_backend, 2);
    assert_eq!(
        (stats.cold_owner, stats.resident_owner, stats.update),
        (0, 0, 0)
    );
    assert_eq!(handle.in_flight(), 0);

    // Every breaker open, panic mode off: the same error, naming the model.
    let policy = BreakerConfig::builder()
        .window(4)
        .minimum_calls(3)
        .build()
        .unwrap();
    let config = BalanceConfig::builder()
        .breaker(policy)
        .panic_threshold(0.0)
        .build()
        .unwrap();
    let mut balancer = ModelBalancer::from_rng(named(&["only"]), config, Lcg(7)).unwrap();
    for _ in 0..3 {
        let picked = pick(&mut balancer, &inference("resnet"));
        picked.guard.finish(Outcome::Failure);
    }
    assert_eq!(balancer.handle().stats().breaker_trips, 1);
    let err = balancer
        .pick(&{
            let mut route = RouteInfo::new(model("resnet"));
            route.urgency = Urgency::Critical;
            route
        })
        .unwrap_err();
    let err = err.downcast_ref::<NoHealthyBackend>().expect("typed");
    assert_eq!(err.model, model("resnet"));
    assert_eq!(balancer.handle().stats().no_backend, 1);
}

/// The latest `Instant` this platform can represent, to a second.
fn end_of_time() -> Instant {
    let mut far = Instant::now();
    for shift in (0..63).rev() {
        if let Some(later) = far.checked_add(Duration::from_secs(1 << shift)) {
            far = later;
        }
    }
    far
}

#[tokio::test(start_paused = true)]
async fn a_now_at_the_end_of_time_is_not_a_panic() {
    let policy = BreakerConfig::builder()
        .window(2)
        .minimum_calls(1)
        .build()
        .unwrap();
    let config = BalanceConfig::builder().breaker(policy).build().unwrap();
    let mut balancer = ModelBalancer::new(named(&["a", "b"]), config).unwrap();
    let far = end_of_time();
    for kind in [RequestKind::Inference, RequestKind::Update] {
        let mut route = RouteInfo::new(ModelId::new("m").unwrap());
        route.kind = kind;
        let picked = balancer.pick_at(&route, far).unwrap();
        // Opening the breaker `open_duration` past the end of time.
        picked.guard.finish_at(Outcome::Failure, far);
    }
    assert!(balancer.handle().stats().breaker_trips >= 1);
}

#[tokio::test(start_paused = true)]
async fn a_backend_forced_open_from_the_handle_is_skipped_until_closed_again() {
    let names = ["a", "b", "c", "d"];
    let mut balancer =
        ModelBalancer::from_rng(named(&names), BalanceConfig::default(), Lcg(7)).unwrap();
    let handle = balancer.handle();
    let route = inference("llama-3-8b");
    let primary = walk(&names, "llama-3-8b")[0];
    assert_eq!(pick(&mut balancer, &route).endpoint, primary);
    let breaker = handle.breaker(&id(primary)).expect("a current backend");
    breaker.set_mode(Mode::ForcedOpen);
    for _ in 0..20 {
        let picked = pick(&mut balancer, &route);
        assert_ne!(picked.endpoint, primary, "drained by hand");
        picked.guard.finish(Outcome::Success);
    }
    breaker.set_mode(Mode::Normal);
    assert_eq!(pick(&mut balancer, &route).endpoint, primary);
    assert!(handle.breaker(&id("nope")).is_none());
}

#[tokio::test(start_paused = true)]
async fn backends_drained_by_hand_stay_out_in_panic_mode() {
    let names = ["a", "b", "c"];
    let mut balancer =
        ModelBalancer::from_rng(named(&names), BalanceConfig::default(), Lcg(8)).unwrap();
    let handle = balancer.handle();
    for name in ["a", "b"] {
        handle
            .breaker(&id(name))
            .unwrap()
            .set_mode(Mode::ForcedOpen);
    }
    // One backend of three admits: below the panic threshold (0.5).
    for i in 0..30 {
        let picked = pick(&mut balancer, &inference(&format!("model-{i}")));
        assert_eq!(picked.endpoint, "c", "drained backends get nothing");
        picked.guard.finish(Outcome::Success);
    }
    assert_eq!(handle.stats().panic, 30, "panic mode, over the undrained");
}

#[tokio::test(start_paused = true)]
async fn the_config_hook_hears_each_backend_breaker_transition_with_its_backend() {
    use std::sync::{Arc, Mutex};
    use tower_model_balance::breaker::Reason;

    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let config = BalanceConfig::builder()
        .breaker(
            BreakerConfig::builder()
                .window(4)
                .minimum_calls(2)
                .build()
                .unwrap(),
        )
        .on_breaker_transition(move |t: &Transition| {
            let backend = t.backend.as_ref().expect("a backend breaker's");
            log.lock()
                .unwrap()
                .push((backend.as_str().to_owned(), t.to, t.reason));
        })
        .build()
        .unwrap();
    let names = ["a", "b", "c"];
    let mut balancer = ModelBalancer::from_rng(named(&names), config, Lcg(9)).unwrap();
    let route = inference("llama-3-8b");
    let primary = walk(&names, "llama-3-8b")[0];
    for _ in 0..2 {
        let picked = pick(&mut balancer, &route);
        assert_eq!(picked.endpoint, primary);
        picked.guard.finish(Outcome::Failure);
    }
    assert_eq!(
        *seen.lock().unwrap(),
        [(primary.to_owned(), BreakerState::Open, Reason::FailureRate)]
    );
}
