//! `Registration` against a real etcd, seen through an `Etcd` source: the
//! record lives with its lease (dropped: gone within the TTL; deregistered:
//! gone at once), a lease etcd lost is granted again, and the record's
//! models follow a simulated server's repository index.

use crate::etcd;
use crate::etcd_source;
use crate::sim_explicit;
use crate::sim_http;

use std::time::Duration;

use tokio::time::Instant;

use etcd::EtcdServer;
use etcd_client::Client;
use etcd_source::{next_changes, source, CHANGE_WITHIN};
use futures_util::StreamExt;
use tower::discover::Change;
use tower_model_balance::backend::{BackendId, BackendMeta};
use tower_model_balance::discover::etcd::{Etcd, EtcdError, Registration};
use tower_model_balance::endpoint::Origin;
use tower_model_balance::health::probe::KServeV2;
use tower_model_balance::route::ModelId;
use tower_model_balance_sim::{protocol, ModelServer};

fn meta(name: &str, address: &str) -> BackendMeta {
    BackendMeta::new(BackendId::new(name).unwrap()).with_address(Origin::parse(address).unwrap())
}

/// The models of the next change, an `Insert`.
async fn next_models(source: &mut Etcd<()>) -> Vec<String> {
    let next = tokio::time::timeout(CHANGE_WITHIN, source.next()).await;
    match next.unwrap().unwrap().unwrap() {
        Change::Insert(_, backend) => {
            let names = backend.meta.resident_models().iter().map(|m| m.to_string());
            names.collect()
        }
        Change::Remove(id) => panic!("{id} left"),
    }
}

async fn start() -> Option<EtcdServer> {
    tokio::task::spawn_blocking(EtcdServer::start)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_lives_with_its_lease() {
    let Some(server) = start().await else { return };
    let url = server.client_url();
    let (mut source, _) = source(&url, "/fleet/");
    let ttl = Duration::from_secs(2);
    let register = |name: &'static str| {
        Registration::builder([url.clone()], "/fleet/", meta(name, "http://127.0.0.1:9"))
            .ttl(ttl)
            .register()
    };
    let kept = register("gpu-0").await.unwrap();
    let dropped = register("gpu-1").await.unwrap();
    assert_eq!(next_changes(&mut source, 2).await, ["+gpu-0:1", "+gpu-1:1"]);
    // Renewed every third of the TTL, gpu-0 outlives several TTLs; gpu-1,
    // dropped, stops renewing and leaves within one.
    let since = Instant::now();
    drop(dropped);
    assert_eq!(next_changes(&mut source, 1).await, ["-gpu-1"]);
    let gone_after = since.elapsed();
    eprintln!("a dropped registration left after {gone_after:?} (TTL {ttl:?})");
    assert!(
        // etcd checks expiries every 500 ms, and its revoke goes through
        // its log: the rest is slack for a busy machine.
        gone_after <= ttl + Duration::from_secs(2),
        "{gone_after:?}"
    );
    // Deregistered: gone at once, far inside its TTL.
    let since = Instant::now();
    kept.deregister().await.unwrap();
    assert_eq!(next_changes(&mut source, 1).await, ["-gpu-0"]);
    assert!(since.elapsed() < ttl / 2, "{:?}", since.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_record_outlives_its_ttl_and_a_lost_lease_is_granted_again() {
    let Some(server) = start().await else { return };
    let url = server.client_url();
    let (mut source, counters) = source(&url, "/fleet/");
    let registration = Registration::builder(
        [url.clone()],
        "/fleet/",
        meta("gpu-0", "http://127.0.0.1:9"),
    )
    .ttl(Duration::from_secs(2))
    .register()
    .await
    .unwrap();
    assert_eq!(next_changes(&mut source, 1).await, ["+gpu-0:1"]);
    // Three TTLs pass with no change: the renewals hold it.
    let quiet = tokio::time::timeout(Duration::from_secs(6), source.next()).await;
    assert!(quiet.is_err(), "a renewed record changed: {quiet:?}");
    // etcd loses the lease (revoked behind the registration's back): the
    // record goes, and the next renewal grants a lease and puts it again.
    let lease = registration.lease_id().await;
    let mut client = Client::connect([url.clone()], None).await.unwrap();
    client.lease_revoke(lease).await.unwrap();
    assert_eq!(next_changes(&mut source, 2).await, ["-gpu-0", "+gpu-0:1"]);
    assert_ne!(registration.lease_id().await, lease);
    // The record deleted under its live lease: put again at the next
    // renewal.
    client.delete("/fleet/gpu-0", None).await.unwrap();
    assert_eq!(next_changes(&mut source, 2).await, ["-gpu-0", "+gpu-0:1"]);
    assert_eq!(counters.stats().stale_events, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_dead_endpoint_of_two_neither_fails_nor_flaps_a_registration() {
    let Some(server) = start().await else { return };
    let url = server.client_url();
    let (mut source, _) = source(&url, "/fleet/");
    // Nothing listens on port 9: half the calls go there.
    let endpoints = ["http://127.0.0.1:9".to_owned(), url.clone()];
    let mut registrations = Vec::new();
    for name in ["gpu-0", "gpu-1", "gpu-2"] {
        let registration = Registration::builder(
            endpoints.clone(),
            "/fleet/",
            meta(name, "http://127.0.0.1:9"),
        )
        .ttl(Duration::from_secs(2))
        .register()
        .await
        .unwrap();
        registrations.push(registration);
    }
    assert_eq!(next_changes(&mut source, 3).await.len(), 3);
    // Three TTLs of renewals, each a call that may reach the dead one.
    let quiet = tokio::time::timeout(Duration::from_secs(6), source.next()).await;
    assert!(quiet.is_err(), "a registration flapped: {quiet:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_records_models_follow_the_servers_repository_index() {
    let Some(server) = start().await else { return };
    let url = server.client_url();
    let sim = ModelServer::start("gpu-0", sim_explicit::explicit().build().unwrap())
        .await
        .unwrap();
    let address = format!("http://{}", sim.addr());
    let registration = Registration::builder([url.clone()], "/fleet/", meta("gpu-0", &address))
        .register()
        .await
        .unwrap();
    let mut tracker = registration
        .track_residency(KServeV2::default(), Duration::from_millis(50))
        .unwrap();
    let (mut source, _) = source(&url, "/fleet/");
    assert_eq!(next_models(&mut source).await, Vec::<String>::new());
    let client = sim_http::client();
    for model in ["m0", "m1"] {
        let (status, _) = sim_explicit::post(&client, &sim, &protocol::load_path(model), "").await;
        assert_eq!(status, 200);
    }
    // One write per change the tracker sees: m0 alone first, or both.
    let mut seen = next_models(&mut source).await;
    if seen == ["m0"] {
        seen = next_models(&mut source).await;
    }
    assert_eq!(seen, ["m0", "m1"]);
    let (status, _) = sim_explicit::post(&client, &sim, &protocol::unload_path("m0"), "").await;
    assert_eq!(status, 200);
    assert_eq!(next_models(&mut source).await, ["m1"]);
    assert_eq!(
        registration.meta().await.resident_models(),
        [ModelId::new("m1").unwrap()]
    );
    // The tracker ends with the registration.
    drop(registration);
    tokio::time::timeout(CHANGE_WITHIN, tracker.stopped())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_registrations_are_typed_errors() {
    let no_address = BackendMeta::new(BackendId::new("gpu-0").unwrap());
    let error = Registration::builder(["http://127.0.0.1:9"], "/fleet/", no_address)
        .register()
        .await
        .unwrap_err();
    assert!(matches!(error, EtcdError::Record(_)), "{error}");
    let m = meta("gpu-0", "http://127.0.0.1:9");
    for (builder, field) in [
        (
            Registration::builder(["http://127.0.0.1:9"], "", m.clone()),
            "prefix",
        ),
        (
            Registration::builder(["http://127.0.0.1:9"], "/f/", m.clone()).ttl(Duration::ZERO),
            "ttl",
        ),
        (
            Registration::builder(Vec::<String>::new(), "/f/", m.clone()),
            "endpoints",
        ),
    ] {
        match builder.register().await.unwrap_err() {
            EtcdError::Config(invalid) => assert_eq!(invalid.field, field),
            other => panic!("{field}: {other}"),
        }
    }
    // Nothing listens on port 9: a client error within the timeout.
    let since = Instant::now();
    let error = Registration::builder(["http://127.0.0.1:9"], "/f/", m)
        .timeout(Duration::from_millis(500))
        .register()
        .await
        .unwrap_err();
    assert!(matches!(error, EtcdError::Client(_)), "{error}");
    assert!(since.elapsed() < Duration::from_secs(5));
}
