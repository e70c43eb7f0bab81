//! Placement with a backend down since the gateway started: its
//! repository cannot be read, so the requests it owns are not held for the
//! load timeout waiting for that read — each fails there at once, unsent,
//! and is retried on a backend that loads the model.

use crate::gateway;

use std::time::Duration;

use tokio::time::Instant;
use tower_model_balance::backend::BackendId;
use tower_model_balance::endpoint::Origin;
use tower_model_balance_sim::{ModelServer, ServerConfig};

use crate::app::{stack_config, Config};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_down_from_the_start_takes_no_model_with_it() {
    let models: Vec<String> = (0..8).map(|i| format!("m{i}")).collect();
    let server = ServerConfig::builder()
        .explicit_load(true)
        .repository(models.iter().map(String::as_str))
        .cold_load(Duration::from_millis(5))
        .build()
        .unwrap();
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
