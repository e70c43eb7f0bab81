//! The layers around a `reqwest::Client`, against simulated model servers
//! on loopback:
//!
//! 1. the circuit breaker alone, directly on `reqwest::Client` (a
//!    `Service<reqwest::Request>`), recording at the response;
//! 2. the model-aware balancer over one `endpoint::ReqwestEndpoint` per
//!    backend (feature `reqwest`: no adapter of your own), each behind
//!    `SetOrigin` and a timeout.
//!
//! ```text
//! cargo run --example reqwest_client
//! ```

use std::time::Duration;

use tower::{Layer, ServiceBuilder, ServiceExt};
use tower_model_balance::backend::{Backend, BackendId};
use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
use tower_model_balance::breaker::{BreakerConfig, CircuitBreakerLayer};
use tower_model_balance::classify::Outcome;
use tower_model_balance::discover::Static;
use tower_model_balance::endpoint::{ReqwestEndpoint, SetOrigin};
use tower_model_balance::error::BreakerOpen;
use tower_model_balance_sim::protocol::{infer_path, BACKEND_HEADER};
use tower_model_balance_sim::{Fault, ModelServer, ServerConfig};

/// reqwest's own responses and errors, as the breaker counts them.
fn classify(result: Result<&reqwest::Response, &reqwest::Error>) -> Outcome {
    match result {
        Ok(rsp) if rsp.status().is_server_error() => Outcome::Failure,
        Ok(rsp) if rsp.status() == 429 => Outcome::Overload,
        Ok(rsp) if rsp.status().is_client_error() => Outcome::Ignored,
        Ok(_) => Outcome::Success,
        Err(_) => Outcome::Failure,
    }
}

#[tokio::main]
async fn main() -> Result<(), tower::BoxError> {
    let mut servers = Vec::new();
    for i in 0..3 {
        servers.push(ModelServer::start(&format!("gpu-{i}"), ServerConfig::default()).await?);
    }
    let client = reqwest::Client::new();

    // 1. The breaker alone on `reqwest::Client`.
    let config = BreakerConfig::builder().window(4).build()?;
    let breaker = CircuitBreakerLayer::new(config)
        .classifier(classify)
        .at_response()
        .layer(client.clone());
    servers[0].set_fault(Some(Fault::Unavailable));
    let url = format!("http://{}{}", servers[0].addr(), infer_path("resnet-50"));
    for _ in 0..4 {
        let req = client.post(&url).body("{}").build()?;
        let rsp = breaker.clone().oneshot(req).await?;
        println!("breaker alone: {}", rsp.status());
    }
    let req = client.post(&url).body("{}").build()?;
    match breaker.oneshot(req).await {
        Err(e) if e.is::<BreakerOpen>() => println!("breaker alone: open ({e})"),
        other => println!("breaker alone: {other:?}"),
    }
    servers[0].set_fault(None);

    // 2. The balancer over one reqwest endpoint per backend.
    let mut backends = Vec::new();
    for server in &servers {
        let origin = format!("http://{}", server.addr());
        let endpoint = ServiceBuilder::new()
            .timeout(Duration::from_secs(30))
            .service(SetOrigin::new(
                ReqwestEndpoint::new(client.clone()),
                &origin,
            )?);
        backends.push(Backend::new(BackendId::new(&origin)?, endpoint));
    }
    let balancer = ModelBalancer::new(Static::new(backends)?, BalanceConfig::default())?;
    for model in [
        "resnet-50",
        "bert-base",
        "resnet-50",
        "llama-3-8b",
        "resnet-50",
    ] {
        let req = http::Request::post(infer_path(model))
            .header("x-model-id", model)
            .body("{}")?;
        let rsp = balancer.clone().oneshot(req).await?;
        println!(
            "{model}: {} from {:?}",
            rsp.status(),
            rsp.headers()[BACKEND_HEADER]
        );
    }
    Ok(())
}
