//! Readiness follows what the gateway can serve: 503 once every
//! backend's pair breakers are open (and their probes fail), 200 while
//! one backend serves; the pair breakers' trips in `/metrics`; 503 while
//! no backend was ever reached, with placement or without. Simulated
//! backends on loopback; every wait is on a response or a bounded poll.

use crate::gateway;

use std::time::Duration;

use std::net::SocketAddr;

use http::{header, StatusCode};
use tower_model_balance::backend::BackendId;
use tower_model_balance::endpoint::Origin;
use tower_model_balance_sim::{Fault, ModelServer, ServerConfig};

use crate::app::{stack_config, Config};
use gateway::{start, Running};

const COMPLETION: &str = r#"{"model": "llama-3-8b", "prompt": "hi"}"#;
const READINESS: [&str; 3] = ["/health", "/v2/health/ready", "/ping"];

/// Sends completions until the gateway answers one by itself (503 with
/// `Retry-After`: every candidate's pair breaker open), at most 100.
async fn until_the_gateway_refuses(gw: &Running) {
    for _ in 0..100 {
        let reply = gw.post("/v1/completions", COMPLETION).await;
        if reply.status == 503 && reply.headers.contains_key(header::RETRY_AFTER) {
            return;
        }
    }
    panic!("the breakers never opened: {:?}", gw.handle.backends());
}

/// Polls readiness until every route answers `want`, for at most 10 s
/// (a probe round is 1 s); panics past it.
async fn until_ready_is(gw: &Running, want: StatusCode) {
    for _ in 0..200 {
        let mut all = true;
        for path in READINESS {
            all &= gw.get(path).await.status == want;
        }
        if all {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "readiness never answered {want}: {:?}",
        gw.handle.backends()
    );
}

/// `name{backend="…"}`'s value in a scrape, 0 if absent.
fn per_backend(scrape: &str, name: &str, backend: &str) -> f64 {
    let prefix = format!("{name}{{backend=\"{backend}\"}} ");
    scrape
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map_or(0.0, |value| value.trim().parse().unwrap())
}

#[tokio::test]
async fn every_backend_failing_makes_readiness_503_and_metrics_show_the_trips() {
    let gw = start("outage", 2, |_| {}).await;
    until_ready_is(&gw, StatusCode::OK).await;
    for sim in &gw.sims {
        sim.set_fault(Some(Fault::Unavailable));
    }
    until_the_gateway_refuses(&gw).await;
    // The probes fail too: once they drop the backends' models, no
    // backend can serve any.
    until_ready_is(&gw, StatusCode::SERVICE_UNAVAILABLE).await;
    let scrape = gw.admin_get("/metrics").await.body;
    for sim in &gw.sims {
        let trips = "model_balance_backend_pair_breaker_trips_total";
        let open = "model_balance_backend_pair_breakers_open";
        let (id, status) = (sim.name(), gw.handle.backends());
        let status = status.iter().find(|b| b.id.as_str() == id).unwrap();
        assert!(per_backend(&scrape, trips, id) >= 1.0, "{id}: {scrape}");
        assert_eq!(
            per_backend(&scrape, trips, id),
            status.pair_breaker_trips as f64
        );
        assert!(per_backend(&scrape, open, id) >= 1.0, "{id}: {scrape}");
    }
    assert!(gw.handle.stats().pair_breaker_trips >= 2);
    // One backend back: ready at its first probe that succeeds (its
    // llama-3-8b pair open still).
    gw.sims[0].set_fault(None);
    until_ready_is(&gw, StatusCode::OK).await;
}

#[tokio::test]
async fn one_healthy_backend_keeps_the_gateway_ready() {
    let gw = start("one-up", 2, |_| {}).await;
    gw.sims[1].set_fault(Some(Fault::Unavailable));
    // Until the failing backend's probe has failed, or its pair opened:
    // either takes it out of the picks.
    for _ in 0..200 {
        let all = gw.handle.backends();
        let down = all.iter().find(|b| b.id.as_str() == "one-up-1").unwrap();
        if down.ejected || down.pair_breakers_open > 0 {
            break;
        }
        let reply = gw.post("/v1/completions", COMPLETION).await;
        assert_eq!(reply.status, 200, "retried elsewhere: {}", reply.body);
    }
    for path in READINESS {
        assert_eq!(gw.get(path).await.status, 200, "{path}");
    }
    let reply = gw.post("/v1/completions", COMPLETION).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}

/// A gateway in front of `n` backends whose ports refuse every connection
/// (servers started, then stopped: their addresses free to start them on
/// again), probed every 100 ms, with placement or without; the servers'
/// config and addresses.
async fn unreachable(
    name: &str,
    n: usize,
    placement: bool,
) -> (Running, ServerConfig, Vec<SocketAddr>) {
    let server = ServerConfig::builder()
        .explicit_load(placement)
        .repository(["llama-3-8b"])
        .cold_load(Duration::from_millis(5))
        .build()
        .unwrap();
    let (mut backends, mut addrs) = (Vec::new(), Vec::new());
    for i in 0..n {
        let sim = ModelServer::start(&format!("{name}-{i}"), server.clone())
            .await
            .unwrap();
        backends.push((
            BackendId::new(sim.name()).unwrap(),
            Origin::http(sim.addr()),
        ));
        addrs.push(sim.addr());
        sim.stop().await;
    }
    let mut config = Config::new(backends);
    config.placement = placement;
    // Repositories read every 200 ms (30 s by default): with placement a
    // backend is reached by its repository's read.
    let stack = "[probe]\ninterval_ms = 100\n[placement]\nrepository_interval_ms = 200";
    config.stack = stack_config(&stack.parse().unwrap()).unwrap();
    (gateway::serve(config, Vec::new()).await, server, addrs)
}

/// Until every backend's failed probes have lowered its health (bounded):
/// the probes have had their say.
async fn until_probes_failed(gw: &Running) {
    for _ in 0..200 {
        let backends = gw.handle.backends();
        if backends.iter().all(|b| b.ejected || b.health < 1.0) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the probes never failed: {:?}", gw.handle.backends());
}

/// No backend ever reached: readiness 503 on both listeners, though no
/// breaker opened (with placement, requests fail unsent: the repository
/// could not be read); one backend up: 200, and it serves.
async fn never_reached_then_one_up(name: &str, placement: bool) {
    let (gw, server, addrs) = unreachable(name, 2, placement).await;
    until_probes_failed(&gw).await;
    // Refused (502), or unsent with placement (503 `model_load_failed`).
    let reply = gw.post("/v1/completions", COMPLETION).await;
    assert!(reply.status.is_server_error(), "{}", reply.body);
    until_ready_is(&gw, StatusCode::SERVICE_UNAVAILABLE).await;
    assert_eq!(gw.admin_get("/ready").await.status, 503);
    let up = ModelServer::start_on(&format!("{name}-0"), server, addrs[0])
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    until_ready_is(&gw, StatusCode::OK).await;
    println!(
        "{name}: ready {:?} after a backend came up",
        started.elapsed()
    );
    assert_eq!(gw.admin_get("/ready").await.status, 200);
    let reply = gw.post("/v1/completions", COMPLETION).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(up.stats().work >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_placement_no_backend_ever_reached_makes_readiness_503_until_one_answers() {
    never_reached_then_one_up("never-placed", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_placement_no_backend_ever_reached_makes_readiness_503_until_one_answers() {
    never_reached_then_one_up("never-plain", false).await;
}
