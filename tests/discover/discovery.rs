//! Discovery as the balancer sees it: removals, churn between picks,
//! declared residency and per-model fixed owners.

use crate::held;
use crate::lcg;
use crate::until;

use std::collections::{HashMap, HashSet, VecDeque};
use std::convert::Infallible;
use std::time::Duration;

use futures_util::stream;
use tokio::sync::mpsc;
use tower::discover::{Change, Discover, ServiceList};
use tower::util::rng::Rng;
use tower::{Service, ServiceExt};
use tower_model_balance::backend::{Backend, BackendId, BackendMeta};
use tower_model_balance::balance::{
    BalanceConfig, BalancerHandle, ModelBalancer, ResponseBody, StagingConfig,
};
use tower_model_balance::classify::Outcome;
use tower_model_balance::ring::{Ring, RingConfig};
use tower_model_balance::route::{ModelId, RequestKind, RouteInfo};

use held::{Body, Mocks};
use lcg::Lcg;
use until::until;

fn id(name: &str) -> BackendId {
    BackendId::new(name).unwrap()
}

fn model(name: &str) -> ModelId {
    ModelId::new(name).unwrap()
}

/// The backends `model` walks, in ring order (the balancer's default ring,
/// every backend of weight 1).
fn walk(names: &[&'static str], model: &str) -> Vec<&'static str> {
    let members = names.iter().map(|n| (id(n), 1));
    let ring = Ring::build(&RingConfig::default(), members).unwrap();
    let key = ModelId::new(model).unwrap().hash64();
    ring.walk(key).map(|i| names[i]).collect()
}

/// A backend whose endpoint is its name.
fn named(name: &str) -> Backend<String> {
    Backend::new(id(name), name.to_owned())
}

type Changes<K> = mpsc::UnboundedSender<Change<K, Backend<String>>>;

/// A discovery source fed by the test through the returned sender.
fn channel_discover<K: Eq + Send + 'static>() -> (
    Changes<K>,
    impl Discover<Key = K, Service = Backend<String>, Error = Infallible> + Send + 'static,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let changes = stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|c| (Ok::<_, Infallible>(c), rx))
    });
    (tx, changes)
}

fn ids(handle: &BalancerHandle) -> Vec<String> {
    handle.backends().iter().map(|b| b.id.to_string()).collect()
}

#[tokio::test(start_paused = true)]
async fn a_removed_backend_is_not_picked_and_its_requests_finish() {
    const NAMES: [&str; 3] = ["a", "b", "c"];
    let (tx, source) = channel_discover();
    let mut balancer = ModelBalancer::from_rng(source, BalanceConfig::default(), Lcg(1)).unwrap();
    let handle = balancer.handle();
    for name in NAMES {
        tx.send(Change::Insert(name, named(name))).unwrap();
    }
    until(|| handle.backends().len() == 3).await;

    let held = balancer.pick(&RouteInfo::new(model("m"))).unwrap();
    let gone = walk(&NAMES, "m")[0];
    assert_eq!(held.backend().as_str(), gone);
    assert_eq!(handle.in_flight(), 1);
    // A clone made before the removal, with the snapshot of that time.
    let mut stale = balancer.clone();

    tx.send(Change::Remove(gone)).unwrap();
    until(|| !ids(&handle).iter().any(|b| b == gone)).await;
    assert_eq!(handle.backends().len(), 2);
    for i in 0..1_000 {
        let name = format!("m{}", i % 50);
        let kind = if i % 3 == 0 {
            RequestKind::Update
        } else {
            RequestKind::Inference
        };
        let mut route = RouteInfo::new(model(&name));
        route.kind = kind;
        let bal = if i % 2 == 0 {
            &mut balancer
        } else {
            &mut stale
        };
        let picked = bal.pick(&route).unwrap();
        assert_ne!(picked.backend().as_str(), gone, "pick {i}");
        assert_ne!(picked.endpoint, gone, "pick {i}");
        picked.guard.finish(Outcome::Success);
    }
    assert_eq!(handle.in_flight(), 0, "the removed backend is not listed");

    // The request on the removed backend finishes normally, and leaves the
    // fleet's load. Checked through the bounded-load cap over the two
    // backends left, ceil(1.25 × (in flight + 1) / 2): with 2 requests on
    // the model's owner, the cap is 2 and a third request spills to the
    // other backend (where the model is declared resident: every backend's
    // slots are taken by now) — were the removed backend's request still
    // counted, the cap would be 3 and the owner would take it.
    assert_eq!(held.backend().as_str(), gone);
    held.guard.finish(Outcome::Success);
    assert_eq!(handle.in_flight(), 0);
    let route = RouteInfo::new(model("n"));
    let first = balancer.pick(&route).unwrap();
    let other = handle
        .backends()
        .into_iter()
        .map(|b| b.id)
        .find(|b| b != first.backend())
        .unwrap();
    assert!(handle.set_resident_models(&other, [&model("n")]));
    let second = balancer.pick(&route).unwrap();
    assert_eq!(second.backend(), first.backend(), "under the cap");
    let third = balancer.pick(&route).unwrap();
    assert_eq!(third.backend(), &other, "the owner is at the cap");
    assert_eq!(handle.in_flight(), 3);
    drop((first, second, third));
    assert_eq!(handle.in_flight(), 0);
}

/// An endpoint that counts its live clones: the connection pool a removed
/// backend's endpoint would keep open.
#[derive(Debug, Clone)]
struct Counted(#[allow(dead_code)] std::sync::Arc<()>);

/// A removed backend's endpoint is released once discovery publishes the
/// removal, whatever the balancer's clones do: here two clones that routed
/// before the removal and route nothing after it.
#[tokio::test(start_paused = true)]
async fn an_idle_clone_does_not_keep_a_removed_endpoint_alive() {
    let (tx, rx) = mpsc::unbounded_channel();
    let source = stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|c| (Ok::<_, Infallible>(c), rx))
    });
    let mut balancer = ModelBalancer::new(source, BalanceConfig::default()).unwrap();
    let handle = balancer.handle();
    let token = std::sync::Arc::new(());
    let live = std::sync::Arc::downgrade(&token);
    tx.send(Change::Insert("a", Backend::new(id("a"), Counted(token))))
        .unwrap();
    let other = Counted(std::sync::Arc::new(()));
    tx.send(Change::Insert("b", Backend::new(id("b"), other)))
        .unwrap();
    until(|| handle.backends().len() == 2).await;
    let mut idle = balancer.clone();
    for bal in [&mut balancer, &mut idle] {
        for i in 0..20 {
            let route = RouteInfo::new(model(&format!("m{i}")));
            drop(bal.pick(&route).unwrap());
        }
    }

    tx.send(Change::Remove("a")).unwrap();
    until(|| ids(&handle) == ["b"]).await;
    assert!(
        live.upgrade().is_none(),
        "{} clones of the removed endpoint are alive",
        live.strong_count()
    );
    // The clones still route, to what is left.
    let picked = idle.pick(&RouteInfo::new(model("m0"))).unwrap();
    assert_eq!(picked.backend().as_str(), "b");
}

/// One churn run: `rounds` picks from two balancer clones while backends
/// join, leave and change identity under live keys, the discovery task
/// running at random points in between. Returns the distinct backend IDs
/// picked.
async fn churn(config: BalanceConfig, seed: u64, rounds: usize) -> HashSet<String> {
    const SLOTS: usize = 6;
    let (tx, source) = channel_discover::<usize>();
    let mut a = ModelBalancer::from_rng(source, config, Lcg(seed)).unwrap();
    let mut b = a.clone();
    let mut rng = Lcg(seed ^ 0x5eed);
    // Each slot's current identity: `s{slot}-{generation}`, or none.
    let mut live: [Option<u32>; SLOTS] = [None; SLOTS];
    let mut next_generation = 0;
    let mut held = VecDeque::new();
    let mut seen = HashSet::new();
    let mut picks = 0;
    for round in 0..rounds {
        let slot = (rng.next_u64() % SLOTS as u64) as usize;
        match rng.next_u64() % 4 {
            // A join, or a new identity under a live key.
            0 => {
                next_generation += 1;
                live[slot] = Some(next_generation);
                let name = format!("s{slot}-{next_generation}");
                tx.send(Change::Insert(slot, named(&name))).unwrap();
            }
            1 => {
                live[slot] = None;
                tx.send(Change::Remove(slot)).unwrap();
            }
            _ => {}
        }
        if rng.next_u64().is_multiple_of(3) {
            tokio::task::yield_now().await;
        }
        if rng.next_u64().is_multiple_of(50) {
            tokio::time::advance(Duration::from_secs(11)).await;
        }
        let kind = if rng.next_u64().is_multiple_of(4) {
            RequestKind::Update
        } else {
            RequestKind::Inference
        };
        let name = format!("m{}", rng.next_u64() % 20);
        let mut route = RouteInfo::new(model(&name));
        route.kind = kind;
        let balancer = if round % 2 == 0 { &mut a } else { &mut b };
        let Ok(picked) = balancer.pick(&route) else {
            continue;
        };
        picks += 1;
        assert_eq!(
            picked.endpoint,
            picked.backend().as_str(),
            "round {round}: the endpoint is the chosen backend's"
        );
        seen.insert(picked.endpoint.clone());
        // Some requests outlive the changes after them.
        held.push_back(picked);
        if held.len() > 8 {
            let done = held.pop_front().unwrap();
            done.guard.finish(Outcome::Success);
        }
    }
    assert!(picks > rounds * 3 / 4, "{picks} picks in {rounds} rounds");
    drop(held);
    assert_eq!(a.handle().in_flight(), 0);
    // Once the last changes apply, the backends are the live identities,
    // and only they are picked.
    let mut expected: Vec<String> = (0..SLOTS)
        .filter_map(|slot| live[slot].map(|generation| format!("s{slot}-{generation}")))
        .collect();
    expected.sort();
    let handle = a.handle();
    let current = || {
        let mut ids = ids(&handle);
        ids.sort();
        ids
    };
    until(|| current() == expected).await;
    for i in 0..100 {
        let route = RouteInfo::new(model(&format!("m{i}")));
        if let Ok(picked) = b.pick(&route) {
            assert!(expected.contains(&picked.endpoint), "{}", picked.endpoint);
        }
    }
    seen
}

#[tokio::test(start_paused = true)]
async fn the_endpoint_matches_the_chosen_backend_under_churn() {
    let unstaged = StagingConfig::new(1.0, Duration::ZERO).unwrap();
    let configs = [
        BalanceConfig::default(),
        BalanceConfig::builder().staging(unstaged).build().unwrap(),
    ];
    for (seed, config) in configs.into_iter().enumerate() {
        let seen = churn(config, seed as u64 + 1, 5_000).await;
        assert!(seen.len() > 100, "{} identities picked", seen.len());
    }
}

#[tokio::test(start_paused = true)]
async fn declared_residency_steers_the_first_request() {
    const NAMES: [&str; 4] = ["a", "b", "c", "d"];
    let m = model("llama-3-8b");
    let owners = walk(&NAMES, m.as_str());
    let (primary, secondary) = (id(owners[0]), id(owners[1]));
    let changes: Vec<_> = NAMES
        .iter()
        .enumerate()
        .map(|(key, &name)| {
            let mut meta = BackendMeta::new(id(name));
            if name == owners[1] {
                meta = meta.with_resident_models([m.clone()]);
            }
            Ok::<_, Infallible>(Change::Insert(
                key,
                Backend::with_meta(meta, name.to_owned()),
            ))
        })
        .collect();
    let config = BalanceConfig::builder()
        .owners(2)
        .min_owners(2)
        .build()
        .unwrap();
    let mut balancer = ModelBalancer::from_rng(stream::iter(changes), config, Lcg(3)).unwrap();
    let handle = balancer.handle();
    assert!(handle.is_resident(&secondary, &m), "declared on insert");
    assert!(!handle.is_resident(&primary, &m));

    // Without the declaration the first request would be a cold load on
    // the primary.
    let route = RouteInfo::new(m.clone());
    let first = balancer.pick(&route).unwrap();
    assert_eq!(first.backend(), &secondary);
    assert_eq!(first.endpoint, owners[1]);
    let stats = handle.stats();
    assert_eq!((stats.resident_owner, stats.cold_owner), (1, 0));
    first.guard.finish(Outcome::Success);

    // Declared through the handle, replacing what was there.
    assert!(handle.set_resident_models(&primary, [&m]));
    assert!(handle.is_resident(&primary, &m));
    assert!(handle.set_resident_models(&secondary, []));
    assert!(!handle.is_resident(&secondary, &m));
    let next = balancer.pick(&route).unwrap();
    assert_eq!(next.backend(), &primary);
    assert_eq!(handle.stats().resident_owner, 2);
    next.guard.finish(Outcome::Success);
    assert!(!handle.set_resident_models(&id("unknown"), [&m]));
    assert!(!handle.is_resident(&id("unknown"), &m));
}

/// Sends `count` requests for `model`, keeping every response (its body
/// open: in flight), and returns the backends that served them in order.
async fn send_held(
    names: &[&'static str],
    config: BalanceConfig,
    model: &str,
    count: usize,
) -> (Vec<&'static str>, BalancerHandle) {
    let mocks = Mocks::new(names);
    let backends: Vec<_> = mocks
        .mocks
        .iter()
        .map(|m| Backend::new(id(m.name), m.clone()))
        .collect();
    let mut balancer = ModelBalancer::from_rng(ServiceList::new(backends), config, Lcg(4)).unwrap();
    let mut held: Vec<http::Response<ResponseBody<Body>>> = Vec::new();
    let mut order = Vec::new();
    for _ in 0..count {
        let before = mocks.served();
        let req = http::Request::post("/infer")
            .header("x-model-id", model)
            .body(String::new())
            .unwrap();
        held.push(balancer.ready().await.unwrap().call(req).await.unwrap());
        let after = mocks.served();
        let by = names
            .iter()
            .find(|&name| after.get(name) > before.get(name))
            .expect("a backend served the request");
        order.push(*by);
    }
    let handle = balancer.handle();
    assert_eq!(handle.in_flight(), count, "every body is still open");
    (order, handle)
}

#[tokio::test(start_paused = true)]
async fn a_model_given_fixed_owners_uses_them() {
    const NAMES: [&str; 6] = ["a", "b", "c", "d", "e", "f"];
    const REQUESTS: usize = 24;
    let ring = walk(&NAMES, "pinned");
    let owners = &ring[..3];
    // Three owners, past the default `owners` of 2 and whatever demand says.
    let config = BalanceConfig::builder()
        .model_owners(model("pinned"), 3)
        .build()
        .unwrap();
    let (order, handle) = send_held(&NAMES, config, "pinned", REQUESTS).await;

    // Its first three owners in ring order, each loaded once, then a spill.
    assert_eq!(order[..3], *owners, "{order:?}");
    assert!(!owners.contains(&order[3]), "{order:?}");
    // Throughout: an owner whenever one is under the bounded-load cap
    // ceil(1.25 × (in flight + 1) / 6), a non-owner only when none is.
    let mut load = HashMap::<&str, usize>::new();
    for (in_flight, &by) in order.iter().enumerate() {
        let cap = (1.25 * (in_flight + 1) as f64 / NAMES.len() as f64).ceil() as usize;
        let room = owners
            .iter()
            .any(|o| load.get(o).copied().unwrap_or(0) < cap);
        assert_eq!(owners.contains(&by), room, "request {in_flight}: {order:?}");
        *load.entry(by).or_default() += 1;
    }
    let on_owners = order.iter().filter(|b| owners.contains(b)).count();
    let stats = handle.stats();
    assert_eq!(stats.cold_owner, 3, "loaded once on each owner");
    assert_eq!(stats.resident_owner + stats.cold_owner, on_owners as u64);
    assert_eq!(stats.spill, (REQUESTS - on_owners) as u64);
    assert!(stats.spill > 0 && on_owners > REQUESTS / 2, "{order:?}");

    // A model without fixed owners has one while demand warms up: its
    // second request, at the same load, already spills.
    let (_, handle) = send_held(&NAMES, BalanceConfig::default(), "pinned", 4).await;
    let stats = handle.stats();
    assert_eq!((stats.cold_owner, stats.spill), (1, 3));
}
