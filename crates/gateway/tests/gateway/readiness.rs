//! Readiness follows what the gateway can serve: 503 once every
//! backend's pair breakers are open (and their probes fail), 200 while
//! one backend serves; the pair breakers' trips in `/metrics`. Simulated
//! backends on loopback; every wait is on a response or a bounded poll.

use crate::gateway;

use std::time::Duration;

use http::{header, StatusCode};
use tower_model_balance_sim::Fault;

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
