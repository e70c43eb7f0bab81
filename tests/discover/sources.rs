//! The `Static` and `Watch` discovery sources, alone and feeding a
//! balancer.

use crate::until;

use std::task::Poll;

use tokio::sync::watch;
use tokio_test::task;
use tower::discover::Change;
use tower_model_balance::backend::{Backend, BackendId, BackendMeta};
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
use tower_model_balance::classify::Outcome;
use tower_model_balance::discover::{Static, Watch};
use tower_model_balance::route::{ModelId, RouteInfo};

use until::until;

fn id(name: &str) -> BackendId {
    BackendId::new(name).unwrap()
}

/// A backend whose endpoint is its name.
fn named(name: &str) -> Backend<String> {
    Backend::new(id(name), name.to_owned())
}

fn weighted(name: &str, weight: u32) -> Backend<String> {
    let meta = BackendMeta::new(id(name)).with_weight(weight).unwrap();
    Backend::with_meta(meta, name.to_owned())
}

type Item = Option<Result<Change<BackendId, Backend<String>>, std::convert::Infallible>>;

/// What a change says, for comparing: `+name@weight/endpoint` or `-name`.
fn show(item: Poll<Item>) -> String {
    match item {
        Poll::Ready(Some(Ok(Change::Insert(key, backend)))) => {
            assert_eq!(&key, backend.meta.id(), "keyed by ID");
            format!("+{key}@{}/{}", backend.meta.weight(), backend.endpoint)
        }
        Poll::Ready(Some(Ok(Change::Remove(key)))) => format!("-{key}"),
        Poll::Ready(Some(Err(never))) => match never {},
        Poll::Ready(None) => "end".to_owned(),
        Poll::Pending => "pending".to_owned(),
    }
}

/// Every change ready now, then what stopped the drain.
fn drain<S>(stream: &mut task::Spawn<S>) -> Vec<String>
where
    S: futures_util::Stream<
        Item = Result<Change<BackendId, Backend<String>>, std::convert::Infallible>,
    >,
{
    let mut seen = Vec::new();
    loop {
        let shown = show(stream.poll_next());
        let last = shown == "pending" || shown == "end";
        seen.push(shown);
        if last {
            return seen;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn static_yields_its_list_then_stays_pending() {
    let list = Static::new([named("a"), weighted("b", 3), named("c")]).unwrap();
    let mut list = task::spawn(list);
    assert_eq!(drain(&mut list), ["+a@1/a", "+b@3/b", "+c@1/c", "pending"]);
    // Still pending later: not ended, and nothing to wake for.
    tokio::time::advance(std::time::Duration::from_secs(3_600)).await;
    assert!(!list.is_woken());
    assert_eq!(drain(&mut list), ["pending"]);

    let mut empty = task::spawn(Static::<String>::new([]).unwrap());
    assert_eq!(drain(&mut empty), ["pending"]);
}

#[test]
fn static_refuses_duplicate_ids() {
    let error = Static::new([named("a"), named("b"), weighted("a", 2)]).unwrap_err();
    assert_eq!(error.field, "backends");
    assert!(error.to_string().contains("distinct"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn watch_yields_the_differences_between_sets() {
    let (tx, rx) = watch::channel(vec![named("a"), named("b")]);
    let source = Watch::new(rx);
    let counters = source.handle();
    let mut source = task::spawn(source);
    assert_eq!(drain(&mut source), ["+a@1/a", "+b@1/b", "pending"]);

    // A join.
    tx.send(vec![named("a"), named("b"), named("c")]).unwrap();
    assert!(source.is_woken());
    assert_eq!(drain(&mut source), ["+c@1/c", "pending"]);

    // A weight change re-inserts; an unchanged set says nothing.
    tx.send(vec![named("a"), weighted("b", 2), named("c")])
        .unwrap();
    assert!(source.is_woken());
    assert_eq!(drain(&mut source), ["+b@2/b", "pending"]);
    tx.send(vec![named("c"), named("a"), weighted("b", 2)])
        .unwrap();
    assert!(source.is_woken());
    assert_eq!(drain(&mut source), ["pending"], "reordered, unchanged");
    // A new endpoint with unchanged metadata is not announced.
    let moved = Backend::new(id("a"), "a-moved".to_owned());
    tx.send(vec![moved, weighted("b", 2), named("c")]).unwrap();
    assert_eq!(drain(&mut source), ["pending"]);

    // A leave and a join at once: the removal first.
    tx.send(vec![weighted("b", 2), named("c"), named("d")])
        .unwrap();
    assert_eq!(drain(&mut source), ["-a", "+d@1/d", "pending"]);

    // Sets sent between polls are coalesced: only the last one counts.
    tx.send(vec![named("x")]).unwrap();
    tx.send(vec![named("c"), named("d")]).unwrap();
    assert_eq!(drain(&mut source), ["-b", "pending"]);
    assert_eq!(counters.stats().duplicates, 0);

    // The last set is still applied after the sender goes, then the end.
    tx.send(vec![named("d")]).unwrap();
    drop(tx);
    assert!(source.is_woken());
    assert_eq!(drain(&mut source), ["-c", "end"]);
    assert_eq!(drain(&mut source), ["end"], "stays ended");
}

#[tokio::test(start_paused = true)]
async fn watch_keeps_the_first_of_duplicate_ids_and_counts_the_rest() {
    let set = vec![named("a"), weighted("a", 5), named("b"), weighted("a", 7)];
    let (tx, rx) = watch::channel(set);
    let source = Watch::new(rx);
    let counters = source.handle();
    let mut source = task::spawn(source);
    assert_eq!(drain(&mut source), ["+a@1/a", "+b@1/b", "pending"]);
    assert_eq!(counters.stats().duplicates, 2);

    tx.send(vec![weighted("b", 4), named("b")]).unwrap();
    assert_eq!(drain(&mut source), ["-a", "+b@4/b", "pending"]);
    assert_eq!(counters.stats().duplicates, 3);
    assert!(format!("{counters:?}").contains("duplicates: 3"));
}

#[tokio::test(start_paused = true)]
async fn watch_starts_from_the_set_current_when_first_polled() {
    let (tx, rx) = watch::channel(vec![named("a")]);
    let mut source = task::spawn(Watch::new(rx));
    tx.send(vec![named("b")]).unwrap();
    assert_eq!(drain(&mut source), ["+b@1/b", "pending"]);
    drop(tx);
    assert_eq!(drain(&mut source), ["end"]);
}

fn sorted_ids(handle: &tower_model_balance::balance::BalancerHandle) -> Vec<String> {
    let mut ids: Vec<_> = handle.backends().iter().map(|b| b.id.to_string()).collect();
    ids.sort();
    ids
}

#[tokio::test(start_paused = true)]
async fn a_balancer_fed_by_a_watch_sees_backends_come_and_go() {
    let (tx, rx) = watch::channel(vec![named("a"), named("b")]);
    let mut balancer = ModelBalancer::new(Watch::new(rx), BalanceConfig::default()).unwrap();
    let handle = balancer.handle();
    // The set current at construction is applied before `new` returns.
    assert_eq!(sorted_ids(&handle), ["a", "b"]);

    tx.send_modify(|set| set.push(named("c")));
    until(|| sorted_ids(&handle) == ["a", "b", "c"]).await;

    // A request held on one backend; its weight changes: updated in place,
    // the request still counted there.
    let route = RouteInfo::new(ModelId::new("llama-3-8b").unwrap());
    let held = balancer.pick(&route).unwrap();
    let on = held.backend().clone();
    assert_eq!(held.endpoint, on.as_str());
    tx.send_modify(|set| {
        for backend in set.iter_mut() {
            if backend.meta.id() == &on {
                backend.meta = backend.meta.clone().with_weight(2).unwrap();
            }
        }
    });
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let status = handle.backends().into_iter().find(|b| b.id == on).unwrap();
    assert_eq!(status.in_flight, 1, "same backend state after the update");

    // It leaves: not listed, and never picked again.
    tx.send_modify(|set| set.retain(|b| b.meta.id() != &on));
    until(|| !sorted_ids(&handle).contains(&on.to_string())).await;
    assert_eq!(handle.backends().len(), 2);
    for i in 0..200 {
        let route = RouteInfo::new(ModelId::new(&format!("m{i}")).unwrap());
        let picked = balancer.pick(&route).unwrap();
        assert_ne!(picked.backend(), &on);
        picked.guard.finish(Outcome::Success);
    }
    held.guard.finish(Outcome::Success);

    // The registry goes away: the balancer keeps what it has.
    drop(tx);
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(handle.backends().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_balancer_fed_by_a_static_list_routes_over_it() {
    let list = Static::new([named("a"), named("b"), named("c")]).unwrap();
    let mut balancer = ModelBalancer::new(list, BalanceConfig::default()).unwrap();
    assert_eq!(sorted_ids(&balancer.handle()), ["a", "b", "c"]);
    let route = RouteInfo::new(ModelId::new("m").unwrap());
    let picked = balancer.pick(&route).unwrap();
    assert_eq!(picked.endpoint, picked.backend().as_str());
}

#[tokio::test(start_paused = true)]
async fn the_discovery_task_stops_with_the_balancer_though_its_source_is_quiet() {
    let (fleet, sets) = watch::channel(vec![named("a"), named("b")]);
    let balancer = ModelBalancer::new(Watch::new(sets), BalanceConfig::default()).unwrap();
    let handle = balancer.handle();
    until(|| handle.backends().len() == 2).await;
    drop(balancer);
    tokio::task::yield_now().await;
    assert_eq!(
        fleet.receiver_count(),
        1,
        "a handle keeps the balancer alive"
    );
    drop(handle);
    // The task drops its source (and with it the receiver) when it stops.
    until(|| fleet.receiver_count() == 0).await;
}
