//! The guard's unit tests.

use http::HeaderMap;

use super::*;
use crate::balance::completion::finish::read_residency;
use crate::balance::config::fields::ResidencyHeader;
use crate::balance::state::fleet::Fleet;
use crate::balance::state::residency::Presence;
use crate::balance::state::traffic::Branch;
use crate::breaker::BreakerConfig;

fn state() -> Arc<BackendState> {
    let id = BackendId::new("b0").unwrap();
    let policy = BreakerConfig::builder().build().unwrap();
    Arc::new(BackendState::new(
        id,
        policy,
        Arc::new(Fleet::new()),
        Start::default(),
    ))
}

/// A request on `state` started.
fn started(state: &Arc<BackendState>) -> InFlight {
    InFlight::start(state.clone(), Branch::ResidentOwner)
}

#[tokio::test(start_paused = true)]
async fn a_cold_load_header_marks_the_model_served_even_if_the_body_is_dropped() {
    const KEY: u64 = 42;
    let id = BackendId::new("b0").unwrap();
    let policy = BreakerConfig::builder().build().unwrap();
    let mut fleet = Fleet::new();
    let header = http::HeaderName::from_static("x-cold");
    fleet.settings.residency_header = Some(ResidencyHeader::ColdLoad(header));
    let state = Arc::new(BackendState::new(
        id,
        policy,
        Arc::new(fleet),
        Start::default(),
    ));
    state.residency.touch(KEY, 0);
    let guard = Guard::new(
        started(&state),
        Admission::Bypass,
        None,
        Some(KEY),
        Warmth::Cold,
        None,
    );
    read_residency(&guard, &HeaderMap::new());
    assert_eq!(
        state.residency.presence(KEY, || 0),
        Presence::Loading,
        "no header"
    );
    let mut headers = HeaderMap::new();
    headers.insert("x-cold", http::HeaderValue::from_static("true"));
    read_residency(&guard, &headers);
    drop(guard); // cancelled: only the header confirmed it
    assert_eq!(state.residency.presence(KEY, || 0), Presence::Served);
}

#[tokio::test(start_paused = true)]
async fn only_a_success_confirms_the_model_served() {
    const KEY: u64 = 42;
    let state = state();
    state.residency.touch(KEY, 0);
    let guard = |warmth| {
        Guard::new(
            started(&state),
            Admission::Bypass,
            None,
            Some(KEY),
            warmth,
            None,
        )
    };
    guard(Warmth::Cold).finish(Outcome::Failure);
    drop(guard(Warmth::Cold));
    guard(Warmth::Warm).finish(Outcome::Success);
    assert_eq!(state.residency.presence(KEY, || 0), Presence::Loading);
    guard(Warmth::Cold).finish(Outcome::Success);
    assert_eq!(state.residency.presence(KEY, || 0), Presence::Served);
    assert_eq!(state.load(), 0);
}
