//! The stack against model servers nobody here wrote: MLServer 1.7.1 in
//! explicit model-control mode (nothing loaded until the gateway loads it)
//! and KServe's own Python model server, real processes on 127.0.0.1 from
//! the virtual environments `.ci/run` makes, with the tiny runtime of
//! `tests/mlserver/` (loads take 0.5 s, inferences 10 ms). The gateway's
//! app (`crates/gateway`) is what the requests go through; a real client
//! (tritonclient) drives one test. No sleeps but the bounded wait for a
//! process to come up: every other wait is on an answer or a count.
//!
//! Each test prints its figures (`real-servers: …`); under `CI` a missing
//! server fails the test instead of skipping it.
//!
//! The crate's client stack with no gateway in front of it:
//! `tests/real_servers_client.rs`.

use std::time::Duration;

use tokio::time::Instant;
use tower_model_balance::backend::BackendId;
use tower_model_balance::route::ModelId;
use tower_model_balance_test_support::{mlserver, real_gateway, real_load};

use mlserver::{Fleet, Kind, Models};
use real_gateway::{gateway, tritonclient};
use real_load::{drive, failures, median, ok_share, zipf, SERIAL};

/// MLServer's Zipf workload through the gateway: the acceptance.
///
/// Four MLServer instances, explicit mode, nothing preloaded, 12 models;
/// 2,000 Zipf requests at 8 at once; then the added p50 over a direct call
/// on kept-alive connections; then one server killed and restarted empty
/// under traffic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mlserver_fleet_in_explicit_mode_through_the_gateway() {
    let _serial = SERIAL.lock().await;
    let models = Models::new(12, Duration::from_millis(500), Duration::from_millis(10));
    let Some(mut fleet) = Fleet::start(Kind::MlServer, 4, models).await else {
        return;
    };
    let gw = gateway(&fleet, |_| {}).await;

    // 1. 2,000 Zipf requests, 8 at once, nothing loaded at the start.
    let started = Instant::now();
    let sent = drive(gw.addr, &zipf(12, 2_000, 1), 8).await;
    let took = started.elapsed();
    let ok = ok_share(&sent);
    let stats = gw.handle.stats();
    let placement = gw.handle.placement_stats().unwrap();
    eprintln!(
        "real-servers: mlserver x4, 12 models, 2000 Zipf requests at 8: {:.2}% ok in {:.1} s; \
         routed {} resident owner, {} cold owner, {} spilled; {} loads, {} unloads, {} load failures; \
         {} breaker trips, {} pair breaker trips",
        ok * 100.0,
        took.as_secs_f64(),
        stats.resident_owner,
        stats.cold_owner,
        stats.spill,
        placement.loads,
        placement.unloads,
        placement.load_failures,
        gw.handle.stats().breaker_trips,
        gw.handle.stats().pair_breaker_trips,
    );
    assert!(ok >= 0.995, "{:.2}% ok: {}", ok * 100.0, failures(&sent));
    assert_eq!(
        gw.handle.stats().breaker_trips,
        0,
        "every server is up: {:?}",
        gw.handle.backends()
    );
    assert!(
        gw.handle.backends().iter().all(|b| !b.ejected),
        "nobody ejected: {:?}",
        gw.handle.backends()
    );

    // 2. No model on more servers than its owners plus one.
    let mut copies = vec![0usize; 12];
    for server in &fleet.servers {
        for name in server.ready_models().await {
            copies[name[1..].parse::<usize>().unwrap()] += 1;
        }
    }
    for (i, &n) in copies.iter().enumerate() {
        let owners = gw
            .handle
            .owners(&ModelId::new(&format!("m{i}")).unwrap())
            .len();
        assert!(
            n <= owners + 1,
            "m{i} loaded on {n} servers, {owners} owners: {copies:?}"
        );
    }
    eprintln!("real-servers: copies loaded per model (m0..m11): {copies:?}");

    // 3. The gateway's added p50 over a direct call, kept-alive, one at a
    //    time, interleaved: a model and a server that holds it.
    let (server, model) = {
        let mut found = None;
        for (i, s) in fleet.servers.iter().enumerate() {
            if let Some(m) = s.ready_models().await.first() {
                found = Some((i, m.clone()));
                break;
            }
        }
        found.expect("some model is loaded")
    };
    let direct_addr = fleet.servers[server].http;
    let client = mlserver::client();
    let path = format!("/v2/models/{model}/infer");
    let (mut direct, mut through) = (Vec::new(), Vec::new());
    for i in 0..300 {
        for (addr, out) in [(direct_addr, &mut direct), (gw.addr, &mut through)] {
            let start = Instant::now();
            let (status, body) =
                mlserver::post(&client, addr, &path, mlserver::infer_body(i)).await;
            assert_eq!(status, 200, "{body}");
            out.push(start.elapsed());
        }
    }
    // What the hop adds: the median of each pair's difference (the two
    // calls of a pair are made back to back, so a slow spell of the
    // machine, with the other tests' servers running beside this one,
    // weighs on both alike).
    let mut added: Vec<f64> = direct
        .iter()
        .zip(&through)
        .map(|(d, t)| t.as_secs_f64() - d.as_secs_f64())
        .collect();
    added.sort_by(f64::total_cmp);
    let added = Duration::from_secs_f64(added[added.len() / 2].max(0.0));
    let (direct, through) = (median(direct), median(through));
    eprintln!(
        "real-servers: p50 direct {:.2} ms, through the gateway {:.2} ms; added, median of pairs: +{:.2} ms",
        direct.as_secs_f64() * 1e3,
        through.as_secs_f64() * 1e3,
        added.as_secs_f64() * 1e3
    );
    // A debug build's hop on 2 cores, beside the other tests' servers:
    // 1.2–2.2 ms measured (1.85 ms with this session's first commit's
    // crate too: the machine, not a change); 3 ms holds on a loaded one.
    assert!(added <= Duration::from_millis(3), "added p50 {added:?}");

    // 4. A server killed under traffic and restarted empty.
    let victim = 0;
    let victim_id = BackendId::new(&fleet.servers[victim].name).unwrap();
    let owned: Vec<usize> = (0..12)
        .filter(|i| {
            gw.handle
                .owners(&ModelId::new(&format!("m{i}")).unwrap())
                .contains(&victim_id)
        })
        .collect();
    fleet.servers[victim].kill();
    let down = drive(gw.addr, &zipf(12, 500, 2), 8).await;
    fleet.servers[victim].restart().await;
    let back_at = Instant::now();
    let after = drive(gw.addr, &zipf(12, 1_500, 3), 8).await;
    let after_ok = ok_share(&after);
    let last_error = after
        .iter()
        .filter(|s| s.status != 200)
        .map(|s| s.at.saturating_duration_since(back_at))
        .max();
    // Its models serve again: each model it owns answers through the
    // gateway, and it holds models again.
    let reloaded = fleet.servers[victim].ready_models().await;
    eprintln!(
        "real-servers: killed {}: {:.2}% ok while down (500 requests: {}); restarted empty: \
         {:.2}% ok of the 1500 after ({} errors: {}, the last {:?} after it was back); it owns {owned:?}, \
         holds {reloaded:?} again; {} breaker trips",
        fleet.servers[victim].name,
        ok_share(&down) * 100.0,
        failures(&down),
        after_ok * 100.0,
        after.iter().filter(|s| s.status != 200).count(),
        failures(&after),
        last_error,
        gw.handle.stats().breaker_trips,
    );
    // Once it is back, no client sees an error: a 404 from it for a model
    // the balancer still believed there is retried on another backend
    // that serves the model (or loads it) before the client is answered.
    // A count, not a time bound: how long the breaker's open window keeps
    // it out depends on the machine's load, and it is asserted nowhere.
    assert_eq!(
        after.iter().filter(|s| s.status != 200).count(),
        0,
        "errors after the restart (the last {last_error:?} after it was back): {}",
        failures(&after)
    );
    for &i in &owned {
        assert!(
            after.iter().any(|s| s.model == i && s.status == 200),
            "m{i} (owned by the restarted server) served again"
        );
    }
    // Back in rotation: once its breaker's open time has passed and its
    // probes answer, it loads what it owns again. Bounded: 60 rounds of
    // 100 requests.
    let mut rounds = 0;
    while fleet.servers[victim].ready_models().await.is_empty() {
        rounds += 1;
        assert!(
            rounds <= 60,
            "the restarted server never got a model back: {:?}",
            gw.handle.backends()
        );
        let more = drive(gw.addr, &zipf(12, 100, 10 + rounds), 8).await;
        assert!(ok_share(&more) >= 0.99, "{}", failures(&more));
    }
    eprintln!(
        "real-servers: the restarted server holds {:?} again {:.1} s after it was back ({rounds} rounds of 100 requests)",
        fleet.servers[victim].ready_models().await,
        back_at.elapsed().as_secs_f64()
    );
    drop(gw);
}

/// tritonclient, the real KServe v2 client, through the gateway in front
/// of two MLServer instances in explicit mode: server readiness, JSON
/// tensors (the gateway loads the model on its owner), then model
/// readiness and metadata from the server that holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tritonclient_through_the_gateway() {
    let _serial = SERIAL.lock().await;
    let models = Models::new(3, Duration::from_millis(200), Duration::from_millis(5));
    let Some(fleet) = Fleet::start(Kind::MlServer, 2, models).await else {
        return;
    };
    let gw = gateway(&fleet, |_| {}).await;
    let stdout = tritonclient(gw.addr, &["m0", "m1", "m2"]).await;
    assert_eq!(stdout.matches("JSON inference ok").count(), 3, "{stdout}");
    assert_eq!(gw.handle.stats().breaker_trips, 0);
}

/// KServe's own Python model server (every model loaded at start, no
/// repository index, metrics on its HTTP port): the same gateway, with
/// placement off, serves a Zipf workload, its probes keep every server in,
/// and a server killed under traffic is routed around.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kserve_servers_through_the_gateway() {
    let _serial = SERIAL.lock().await;
    let models = Models::new(6, Duration::from_millis(50), Duration::from_millis(10));
    let Some(mut fleet) = Fleet::start(Kind::KServe, 3, models).await else {
        return;
    };
    let gw = gateway(&fleet, |config| config.placement = false).await;
    let sent = drive(gw.addr, &zipf(6, 600, 7), 8).await;
    let ok = ok_share(&sent);
    eprintln!(
        "real-servers: kserve x3, 6 models, 600 Zipf requests at 8: {:.2}% ok; {} breaker trips; {:?}",
        ok * 100.0,
        gw.handle.stats().breaker_trips,
        gw.handle
            .backends()
            .iter()
            .map(|b| (b.id.to_string(), b.health, b.ejected))
            .collect::<Vec<_>>()
    );
    assert!(ok >= 0.995, "{:.2}% ok: {}", ok * 100.0, failures(&sent));
    assert_eq!(gw.handle.stats().breaker_trips, 0);
    assert!(
        gw.handle.backends().iter().all(|b| !b.ejected),
        "{:?}",
        gw.handle.backends()
    );
    // tritonclient's binary tensor extension, which KServe's server speaks,
    // passes through the gateway untouched.
    let stdout = tritonclient(gw.addr, &["--binary", "m0", "m4"]).await;
    assert_eq!(stdout.matches("binary inference ok").count(), 2, "{stdout}");
    // Metadata and readiness through the gateway, from an owner.
    let client = mlserver::client();
    let (status, body) = mlserver::get(&client, gw.addr, "/v2/models/m3/ready").await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = mlserver::get(&client, gw.addr, "/v2/health/ready").await;
    assert_eq!(status, 200);
    // One server killed: its requests go elsewhere (a refused connection
    // is retried on another backend; its breaker opens).
    fleet.servers[1].kill();
    let down = drive(gw.addr, &zipf(6, 600, 8), 8).await;
    let down_ok = ok_share(&down);
    eprintln!(
        "real-servers: kserve, one of 3 killed: {:.2}% ok of 600 ({})",
        down_ok * 100.0,
        failures(&down)
    );
    assert!(down_ok >= 0.99, "{}", failures(&down));
}

/// Models that cannot load, or fail every inference, against MLServer
/// through the gateway: their own requests fail (typed, at once once their
/// breakers are open), and nobody else's — no server is ejected, no
/// server's breaker opens, healthy models are served throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_models_do_not_take_the_fleet_down() {
    let _serial = SERIAL.lock().await;
    let models = Models::new(4, Duration::from_millis(100), Duration::from_millis(5))
        .with("unloadable", serde_json::json!({"fail_load": true}))
        .with("failing", serde_json::json!({"fail_predict": true}));
    let Some(fleet) = Fleet::start(Kind::MlServer, 3, models).await else {
        return;
    };
    let gw = gateway(&fleet, |_| {}).await;
    let client = mlserver::client();
    // MLServer closes a connection after each 500 it answers, so a request
    // sent on one as it closes is retried elsewhere: the retry budget's
    // floor (10 a second) funds those at this low traffic, where its 5% of
    // requests alone did not.
    let warm = drive(gw.addr, &zipf(4, 100, 8), 4).await;
    assert_eq!(ok_share(&warm), 1.0, "{}", failures(&warm));
    let (mut good, mut good_ok, mut bad_statuses) = (0, 0, Vec::new());
    let plan = zipf(4, 300, 9);
    for (i, &m) in plan.iter().enumerate() {
        // One request of a broken model for every two good ones.
        if i % 2 == 0 {
            let bad = ["unloadable", "failing"][i / 2 % 2];
            let path = format!("/v2/models/{bad}/infer");
            let (status, _) =
                mlserver::post(&client, gw.addr, &path, mlserver::infer_body(i)).await;
            bad_statuses.push(status);
        }
        let path = format!("/v2/models/m{m}/infer");
        let (status, body) = mlserver::post(&client, gw.addr, &path, mlserver::infer_body(i)).await;
        good += 1;
        if status == 200 {
            good_ok += 1;
        } else {
            let budget = gw._gateway.hedge.budget();
            eprintln!(
                "m{m}: {status} {body} (retries granted {}, refused {})",
                budget.granted(),
                budget.refused()
            );
        }
    }
    let (ready, _) = mlserver::get(&client, gw.addr, "/v2/health/ready").await;
    eprintln!(
        "real-servers: broken models: {good_ok} of {good} good requests ok; broken answered {:?}; \
         {} server breaker trips, {} pair trips, placement {:?}",
        {
            let mut counts = std::collections::BTreeMap::<u16, usize>::new();
            for s in &bad_statuses {
                *counts.entry(*s).or_default() += 1;
            }
            counts
        },
        gw.handle.stats().breaker_trips,
        gw.handle.stats().pair_breaker_trips,
        gw.handle.placement_stats(),
    );
    assert_eq!(good_ok, good, "healthy models are served throughout");
    assert!(
        bad_statuses.iter().all(|&s| s == 500 || s == 503),
        "{bad_statuses:?}"
    );
    assert_eq!(
        gw.handle.stats().breaker_trips,
        0,
        "no server's breaker: {:?}",
        gw.handle.backends()
    );
    assert!(
        gw.handle.backends().iter().all(|b| !b.ejected),
        "{:?}",
        gw.handle.backends()
    );
    assert!(
        gw.handle.stats().pair_breaker_trips >= 1,
        "the failing model's pairs trip"
    );
    assert_eq!(ready, 200);
}
