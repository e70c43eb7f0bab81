//! Placement with a backend down since the gateway started: its
//! repository cannot be read, so the requests it owns are not held for the
//! load timeout waiting for that read — each fails there at once, unsent,
//! and is retried on a backend that loads the model. And with a backend
//! that hangs once its repository was read: the requests waiting there for
//! a load are held only until health ejects it, then retried elsewhere.

use crate::gateway;

use std::time::Duration;

use tokio::time::Instant;
use tower_model_balance::backend::BackendId;
use tower_model_balance::endpoint::Origin;
use tower_model_balance::route::ModelId;
use tower_model_balance_sim::{Fault, ModelServer, ServerConfig};

use crate::app::{stack_config, Config};

/// A server in explicit model-control mode whose repository lists
/// `models`, each loading in 5 ms.
fn explicit_server(models: &[String]) -> ServerConfig {
    ServerConfig::builder()
        .explicit_load(true)
        .repository(models.iter().map(String::as_str))
        .cold_load(Duration::from_millis(5))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_down_from_the_start_takes_no_model_with_it() {
    let models: Vec<String> = (0..8).map(|i| format!("m{i}")).collect();
    let server = explicit_server(&models);
    let mut sims = Vec::new();
    let mut backends = Vec::new();
    for i in 0..2 {
        let sim = ModelServer::start(&format!("up-{i}"), server.clone())
            .await
            .unwrap();
        backends.push((
            BackendId::new(sim.name()).unwrap(),
            Origin::http(sim.addr()),
        ));
        sims.push(sim);
    }
    // A port nothing listens on: every connection refused.
    let down = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down_addr = down.local_addr().unwrap();
    drop(down);
    backends.push((BackendId::new("down").unwrap(), Origin::http(down_addr)));
    let mut config = Config::new(backends);
    config.placement = true;
    config.stack = stack_config(&"[probe]\ninterval_ms = 100".parse().unwrap()).unwrap();
    let gw = gateway::serve(config, sims).await;
    let started = Instant::now();
    for model in &models {
        let chat =
            format!(r#"{{"model": "{model}", "messages": [{{"role": "user", "content": "hi"}}]}}"#);
        // `post` waits 10 s at most, against a load timeout of 120 s.
        let reply = gw.post("/v1/chat/completions", chat).await;
        assert_eq!(reply.status, 200, "{model}: {}", reply.body);
    }
    let down = gw
        .handle
        .backends()
        .into_iter()
        .find(|b| b.id.as_str() == "down");
    println!(
        "8 models served in {:?}; the down backend picked {} times",
        started.elapsed(),
        down.map_or(0, |b| b.picked)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loads_waiting_on_a_hung_backend_end_when_health_ejects_it() {
    let models: Vec<String> = (0..24).map(|i| format!("m{i}")).collect();
    let server = explicit_server(&models);
    // The unresponsive rule's cut (10 s by default) reaches only requests
    // sent: the waits for a load end by health's ejection alone.
    let file = "[probe]\ninterval_ms = 100\n[placement]\nload_timeout_ms = 120000\n";
    let gw = gateway::start_with("hang", 3, server, |c| {
        c.placement = true;
        c.owners = Some(1);
        c.stack = stack_config(&file.parse().unwrap()).unwrap();
    })
    .await;
    let chat = |model: &str| {
        format!(r#"{{"model": "{model}", "messages": [{{"role": "user", "content": "hi"}}]}}"#)
    };
    // A load on a backend proves its repository read: that one hangs.
    let reply = gw.post("/v1/chat/completions", chat("m0")).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let hung = gw
        .sims
        .iter()
        .position(|s| s.stats().load_calls > 0)
        .expect("m0 loaded on its owner");
    let hung_id = BackendId::new(gw.sims[hung].name()).unwrap();
    gw.sims[hung].set_fault(Some(Fault::Hang));
    // Three more of the models it owns, at once.
    let owned: Vec<&String> = models[1..]
        .iter()
        .filter(|m| gw.handle.owners(&ModelId::new(m.as_str()).unwrap()) == [hung_id.clone()])
        .take(3)
        .collect();
    assert_eq!(owned.len(), 3, "the hung backend owns three more models");
    let sent = Instant::now();
    // `post` waits 10 s at most, against a load timeout of 120 s.
    let (a, b, c) = tokio::join!(
        gw.post("/v1/chat/completions", chat(owned[0])),
        gw.post("/v1/chat/completions", chat(owned[1])),
        gw.post("/v1/chat/completions", chat(owned[2])),
    );
    let took = sent.elapsed();
    for reply in [a, b, c] {
        assert_eq!(reply.status, 200, "{}", reply.body);
    }
    let stats = gw.handle.placement_stats().unwrap();
    let health = gw.handle.health(&hung_id).unwrap();
    println!("3 models of a hung backend served by its peers in {took:?}: {stats:?}");
    assert!(health.ejected.is_some(), "health ejected it: {health:?}");
    assert!(
        stats.load_failures >= 1,
        "at least one waited for a load there: {stats:?}"
    );
}
