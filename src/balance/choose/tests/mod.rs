//! The pick's unit tests, with the tables they run on.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use tokio::time::Instant;

use crate::backend::BackendId;
use crate::balance::choose::ask::{Ask, Exclusion};
use crate::balance::choose::ctx::*;
use crate::balance::choose::p2c::sample2;
use crate::balance::choose::pick::pick;
use crate::balance::choose::rules::Rules;
use crate::balance::choose::scratch::Scratch;
use crate::balance::state::backend::{BackendState, Start};
use crate::balance::state::clock::Now;
use crate::balance::state::fleet::Fleet;
use crate::balance::state::residency::Warmth;
use crate::balance::state::table::Table;
use crate::balance::state::traffic::Branch;
use crate::breaker::BreakerConfig;
use crate::classify::Outcome;
use crate::ring::{Ring, RingConfig};
use crate::route::{ModelId, RouteInfo};
use crate::route::{RequestKind, Urgency};

fn table(n: usize) -> Table {
    table_in(n, Arc::new(Fleet::new()))
}

/// `n` backends `b0`, `b1`, … sharing `fleet`.
fn table_in(n: usize, fleet: Arc<Fleet>) -> Table {
    let ids: Vec<BackendId> = (0..n)
        .map(|i| BackendId::new(&format!("b{i}")).unwrap())
        .collect();
    let policy = BreakerConfig::builder()
        .window(2)
        .minimum_calls(1)
        .build()
        .unwrap();
    Table {
        ring: Ring::build(
            &RingConfig::default(),
            ids.iter().cloned().map(|id| (id, 1)),
        )
        .unwrap(),
        backends: ids
            .into_iter()
            .map(|id| {
                Arc::new(BackendState::new(
                    id,
                    policy.clone(),
                    fleet.clone(),
                    Start::default(),
                ))
            })
            .collect(),
        fleet,
        in_ring: n as f64,
        assigned: Default::default(),
    }
}

fn trip(table: &Table, index: usize) {
    let breaker = &table.backends[index].breaker;
    breaker.try_acquire().unwrap().record(Outcome::Failure);
    assert!(!breaker.admits());
}

fn set_load(table: &Table, index: usize, load: usize) {
    let old = table.backends[index].traffic.set_in_flight(load);
    table.fleet.gauges.traffic.shift(load as u64, old as u64);
}

fn route(model: &str) -> RouteInfo {
    RouteInfo::new(ModelId::new(model).unwrap())
}

fn walk(table: &Table, route: &RouteInfo) -> Vec<usize> {
    table.ring.walk(route.model.hash64()).collect()
}

/// Makes `route`'s model resident and served on backend `index`.
fn make_resident(table: &Table, index: usize, route: &RouteInfo) {
    let residency = &table.backends[index].residency;
    residency.touch(route.model.hash64(), 0);
    residency.confirm(route.model.hash64());
}

/// Sends `route`'s model to backend `index` now, with no response yet:
/// resident, still loading.
fn start_loading(table: &Table, index: usize, route: &RouteInfo) {
    let now = table.fleet.millis(Instant::now());
    table.backends[index]
        .residency
        .touch(route.model.hash64(), now);
}

/// Fills backend `index`'s model slots with other models, served.
fn fill_slots(table: &Table, index: usize) {
    for m in 0..4 {
        let residency = &table.backends[index].residency;
        residency.touch(u64::MAX - m, 0);
        residency.confirm(u64::MAX - m);
    }
}

fn ask(route: &RouteInfo, owners: usize) -> Ask {
    Ask {
        kind: route.kind,
        urgency: route.urgency,
        key: route.model.hash64(),
        prefix: route.prefix,
        owners,
        sampled: true,
        unseen: false,
        exclude: Exclusion::None,
        assigned: Default::default(),
        cached: Default::default(),
    }
}

const RULES: Rules = Rules {
    load_factor: 1.25,
    panic_threshold: 0.5,
    placement: false,
    prefer_warm: false,
};

/// Picks under [`RULES`], the clock read if needed, a fresh scratch.
fn pick_with(t: &Table, ask: &Ask, random: &mut impl FnMut() -> u64) -> Option<Pick> {
    pick(
        t,
        ask,
        &RULES,
        &Now::lazy(),
        random,
        &mut Scratch::default(),
    )
    .ok()
}

/// A deterministic random stream (an LCG, well mixed).
fn lcg(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed;
    move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        crate::balance::mix::mix(state)
    }
}

/// Picks with no randomness available (inference over at most two
/// resident owners never samples).
fn pick_now(t: &Table, ask: &Ask) -> Option<(usize, Branch)> {
    let mut no_random = || unreachable!("this pick does not sample");
    let p = pick_with(t, ask, &mut no_random)?;
    Some((p.index, p.branch))
}

mod backup;
#[cfg(feature = "kv-events")]
mod cached;
mod inference;
mod panic;
mod prefix;
mod update;
