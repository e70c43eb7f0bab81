//! The crate's stack under a tonic gRPC client speaking KServe v2's
//! `ModelInfer`: one tonic `Channel` per backend under the model-aware
//! balancer, against simulated KServe v2 gRPC servers (tonic) on loopback.
//!
//! ```text
//! cargo run --release --example tonic_client
//! ```
//!
//! It sends a skewed workload through the stack and through plain round
//! robin over the same kind of servers (warm hits against cold loads),
//! shows a tensor round trip, the model ID taken from metadata instead of
//! the message, an empty `model_name` rejected before anything is sent,
//! a server that starts answering `UNAVAILABLE` (the balancer reads
//! the `grpc-status`, opens that backend's breaker after three failures
//! and sends the model to its next owner), and hedged calls: a server
//! that stalls has its calls answered by another (`hedged.rs`).
//!
//! No build script and no `protoc`: the KServe v2 messages are derived
//! with prost's macros in `kserve.rs`.

mod client;
mod errors;
mod hedged;
mod kserve;
mod server;

use std::future::Future;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tonic::metadata::MetadataKey;
use tonic::transport::{Channel, Endpoint};
use tonic::Code;
use tonic_prost::ProstCodec;
use tower_model_balance::error::BoxError;
use tower_model_balance::error::InvalidRoute;
use tower_model_balance::hedge::HedgeConfig;
use tower_model_balance::route::{ModelId, MODEL_ID_HEADER};
use tower_model_balance_sim::protocol::{BACKEND_HEADER, COLD_LOAD_HEADER};

use client::{Config, InferenceClient};
use hedged::Hedging;
use kserve::{ModelInferRequest, ModelInferResponse, MODEL_INFER_PATH};
use server::{GrpcModelServer, ServerConfig};

/// Backends started.
const BACKENDS: usize = 4;
/// Models, hottest first.
const MODELS: [&str; 8] = [
    "resnet-50",
    "bert-base",
    "llama-3-8b",
    "whisper-small",
    "clip-vit",
    "t5-small",
    "yolo-v8",
    "bge-small",
];
/// Calls in the workload, and how many are in flight at once.
const CALLS: usize = 400;
const CONCURRENCY: usize = 4;
/// Calls sent one at a time while a backend fails.
const OUTAGE_CALLS: usize = 40;

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), BoxError> {
    let config = ServerConfig::default();
    let servers = start(BACKENDS, config).await?;
    println!(
        "{BACKENDS} KServe v2 gRPC servers on loopback (tonic; {} resident models each, LRU; a cold load takes {} ms): {}",
        config.slots,
        config.cold_load.as_millis(),
        servers
            .iter()
            .map(|s| format!("{} {}", s.name(), s.addr()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let backends = servers
        .iter()
        .map(GrpcModelServer::backend)
        .collect::<Result<_, _>>()?;
    let mut client_config = Config::new(backends);
    client_config.residency_metadata = true;
    let mut client = InferenceClient::new(&client_config)?;
    println!("client: tonic::client::Grpc over ModelBalancer<Channel>, one HTTP/2 channel per backend, grpc-status read by the balancer\n");

    // 1. The workload, through the stack and through round robin.
    let workload = workload(CALLS);
    let ok = send_all(&client, &workload).await;
    let cold: u64 = servers.iter().map(|s| s.stats().cold_loads).sum();
    println!(
        "1. {CALLS} ModelInfer calls over {} models (Zipf-like, hottest first), {CONCURRENCY} in flight",
        MODELS.len()
    );
    println!(
        "   model-aware: {ok} ok, {cold} cold loads, {} warm ({:.1}% warm)",
        ok.saturating_sub(cold as usize),
        pct(ok.saturating_sub(cold as usize), CALLS)
    );
    let (rr_ok, rr_cold) = round_robin(&workload, config).await?;
    println!(
        "   round robin: {rr_ok} ok, {rr_cold} cold loads, {} warm ({:.1}% warm), the same calls to fresh servers alike",
        rr_ok.saturating_sub(rr_cold as usize),
        pct(rr_ok.saturating_sub(rr_cold as usize), CALLS)
    );
    let stats = client.handle().stats();
    println!(
        "   balancer: {} to a resident owner, {} to a cold owner, {} spilled",
        stats.resident_owner, stats.cold_owner, stats.spill
    );
    table(&servers, &client);

    // 2. A tensor round trip.
    let values = [1.0_f32, 2.5, -3.0];
    let rsp = client
        .model_infer(ModelInferRequest::fp32(MODELS[0], "round-trip", &values))
        .await?;
    let owner = served_by(&rsp);
    let out = rsp
        .get_ref()
        .outputs
        .first()
        .ok_or("an answer without outputs")?;
    let got = out.contents.as_ref().map(|c| c.fp32_contents.clone());
    println!(
        "\n2. round trip: {} input0 FP32 {values:?} → {} {} {:?} (served by {owner}, {})",
        MODELS[0],
        out.name,
        out.datatype,
        got.unwrap_or_default(),
        temperature(&rsp)
    );

    // 3. The model ID from metadata instead of the message.
    let mut req = tonic::Request::new(ModelInferRequest::fp32(MODELS[1], "metadata", &values));
    let key = MetadataKey::from_bytes(MODEL_ID_HEADER.as_str().as_bytes())?;
    req.metadata_mut().insert(key, MODELS[1].parse()?);
    let rsp = client.model_infer_by_metadata(req).await?;
    println!(
        "3. routed by metadata ({MODEL_ID_HEADER}: {}): served by {}, {}",
        MODELS[1],
        served_by(&rsp),
        temperature(&rsp)
    );

    // 4. Bad input.
    let sent = client.handle().stats();
    let Err(status) = client
        .model_infer(ModelInferRequest::fp32("", "bad", &values))
        .await
    else {
        return Err("an empty model name was accepted".into());
    };
    let typed = std::error::Error::source(&status).is_some_and(|s| s.is::<InvalidRoute>());
    let after = client.handle().stats();
    println!(
        "4. model_name \"\": {:?} \"{}\" (source InvalidRoute: {typed}); calls routed meanwhile: {}",
        status.code(),
        status.message(),
        routed(&after) - routed(&sent)
    );

    // 5. The owner of the hottest model fails.
    let failing = servers
        .iter()
        .find(|s| s.name() == owner)
        .ok_or("the owner is one of the servers")?;
    failing.set_fault(Some(Code::Unavailable));
    println!(
        "\n5. {owner} answers every call UNAVAILABLE from now on; the first {OUTAGE_CALLS} calls of the workload again, one at a time:"
    );
    let mut failed = Vec::new();
    let mut ok_by: std::collections::BTreeMap<String, usize> = Default::default();
    for (i, model) in workload.iter().take(OUTAGE_CALLS).enumerate() {
        let req = ModelInferRequest::fp32(model, &format!("outage-{i}"), &values);
        match client.model_infer(req).await {
            Ok(rsp) => *ok_by.entry(served_by(&rsp)).or_default() += 1,
            Err(status) => failed.push(format!("#{} {model} {:?}", i + 1, status.code())),
        }
    }
    let ok_by: Vec<String> = ok_by.iter().map(|(b, n)| format!("{n} from {b}")).collect();
    println!("   failed: {}", failed.join(", "));
    println!("   ok: {}", ok_by.join(", "));
    let status = client
        .handle()
        .backends()
        .into_iter()
        .find(|b| b.id.as_str() == owner)
        .ok_or("the owner is a backend")?;
    println!(
        "   {owner}: {} failures read from grpc-status 14, breaker {:?} after {} trip(s): no call goes there until it half-opens to probe",
        status.failures, status.breaker, status.breaker_trips
    );
    println!(
        "   (a model with a second owner — the hottest have two — moves there after one failure, by cost; one owned by {owner} alone fails until the breaker opens)"
    );
    table(&servers, &client);
    hedging(config).await
}

/// 6. Hedged calls over two fresh servers, one of which stalls.
async fn hedging(config: ServerConfig) -> Result<(), BoxError> {
    const WARM: usize = 10;
    let servers = start(2, config).await?;
    let backends = servers
        .iter()
        .map(GrpcModelServer::backend)
        .collect::<Result<_, _>>()?;
    // A backup after the model's p95, once it has 10 samples, between 20
    // and 200 ms.
    let policy = HedgeConfig::builder()
        .min_samples(WARM as u64)
        .floor(Duration::from_millis(20))
        .ceiling(Duration::from_millis(200))
        .build()?;
    let (mut hedged, hedges) =
        InferenceClient::hedged(&Config::new(backends), &Hedging::new(policy))?;
    let values = [1.0_f32, 2.5];
    let mut owner = String::new();
    for i in 0..WARM {
        let req = ModelInferRequest::fp32(MODELS[0], &format!("warm-{i}"), &values);
        owner = served_by(&hedged.model_infer(req).await?);
    }
    // The hedge recomputes a model's delay at most every 100 ms.
    let model = ModelId::new(MODELS[0])?;
    for _ in 0..100 {
        if hedges.delay(&model).is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stalled = servers
        .iter()
        .find(|s| s.name() == owner)
        .ok_or("the owner")?;
    stalled.hold();
    println!("\n6. hedged: BufferRequestBody → Hedge (BalancerLoad gate) → ModelBalancer → Channel; {WARM} calls of {} to {owner}, then {owner} stalls:", MODELS[0]);
    for i in 0..3 {
        let started = tokio::time::Instant::now();
        let req = ModelInferRequest::fp32(MODELS[0], &format!("hedged-{i}"), &values);
        let rsp = hedged.model_infer(req).await?;
        println!(
            "   call {}: served by {} in {} ms ({})",
            i + 1,
            served_by(&rsp),
            started.elapsed().as_millis(),
            temperature(&rsp)
        );
    }
    stalled.release();
    let st = hedges.stats();
    println!(
        "   hedge: {} requests, {} backups sent, {} won; {} calls held by {owner}, none answered",
        st.requests,
        st.hedges,
        st.hedges_won,
        stalled.held_calls()
    );
    Ok(())
}

/// Starts `n` servers named `b0`, `b1`, ….
async fn start(n: usize, config: ServerConfig) -> Result<Vec<GrpcModelServer>, BoxError> {
    let mut servers = Vec::new();
    for i in 0..n {
        servers.push(GrpcModelServer::start(&format!("b{i}"), config).await?);
    }
    Ok(servers)
}

/// `calls` model names drawn with weight 1 / rank (a fixed LCG: every run
/// sends the same sequence).
fn workload(calls: usize) -> Vec<&'static str> {
    let weights: Vec<f64> = (1..=MODELS.len()).map(|r| 1.0 / r as f64).collect();
    let total: f64 = weights.iter().sum();
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    (0..calls)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let mut x = (state >> 11) as f64 / (1u64 << 53) as f64 * total;
            for (model, w) in MODELS.iter().zip(&weights) {
                if x < *w {
                    return *model;
                }
                x -= w;
            }
            MODELS[MODELS.len() - 1]
        })
        .collect()
}

/// Sends `workload` through `client`, `CONCURRENCY` at a time; the number
/// answered ok.
async fn send_all(client: &InferenceClient, workload: &[&'static str]) -> usize {
    let client = client.clone();
    drive(workload, move |_, model| {
        let mut client = client.clone();
        async move {
            let req = ModelInferRequest::fp32(model, "w", &[1.0]);
            client.model_infer(req).await.is_ok()
        }
    })
    .await
}

/// The same workload over plain tonic channels to fresh servers, call `i`
/// to server `i mod n` (round robin): (ok, cold loads).
async fn round_robin(
    workload: &[&'static str],
    config: ServerConfig,
) -> Result<(usize, u64), BoxError> {
    let servers = start(BACKENDS, config).await?;
    let mut channels: Vec<Channel> = Vec::new();
    for s in &servers {
        channels.push(Endpoint::from_shared(format!("http://{}", s.addr()))?.connect_lazy());
    }
    let ok = drive(workload, move |i, model| {
        let mut grpc = tonic::client::Grpc::new(channels[i % channels.len()].clone());
        async move {
            let codec = ProstCodec::<ModelInferRequest, ModelInferResponse>::default();
            let path = http::uri::PathAndQuery::from_static(MODEL_INFER_PATH);
            let req = tonic::Request::new(ModelInferRequest::fp32(model, "rr", &[1.0]));
            match grpc.ready().await {
                Ok(()) => grpc.unary(req, path, codec).await.is_ok(),
                Err(_) => false,
            }
        }
    })
    .await;
    let cold = servers.iter().map(|s| s.stats().cold_loads).sum();
    Ok((ok, cold))
}

/// Runs `call(i, model)` for each call of `workload`, `CONCURRENCY` at a
/// time; the number that returned true.
async fn drive<F, Fut>(workload: &[&'static str], call: F) -> usize
where
    F: Fn(usize, &'static str) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = bool> + Send,
{
    let workload: Arc<[&'static str]> = workload.into();
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY {
        let (workload, next, call) = (workload.clone(), next.clone(), call.clone());
        workers.spawn(async move {
            let mut ok = 0;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(model) = workload.get(i) else {
                    break ok;
                };
                ok += usize::from(call(i, model).await);
            }
        });
    }
    workers.join_all().await.into_iter().sum()
}

/// One line per backend: what its server did and what the balancer knows.
fn table(servers: &[GrpcModelServer], client: &InferenceClient) {
    println!("   backend  served  cold  failed │ picked  failures  breaker  trips");
    let backends = client.handle().backends();
    for s in servers {
        let st = s.stats();
        let Some(b) = backends.iter().find(|b| b.id.as_str() == s.name()) else {
            continue;
        };
        println!(
            "   {:<7}  {:>6}  {:>4}  {:>6} │ {:>6}  {:>8}  {:<7}  {:>5}",
            s.name(),
            st.served,
            st.cold_loads,
            st.failed,
            b.picked,
            b.failures,
            format!("{:?}", b.breaker),
            b.breaker_trips
        );
    }
}

fn served_by(rsp: &tonic::Response<ModelInferResponse>) -> String {
    metadata(rsp, BACKEND_HEADER.as_str()).unwrap_or_else(|| "?".to_owned())
}

fn temperature(rsp: &tonic::Response<ModelInferResponse>) -> &'static str {
    match metadata(rsp, COLD_LOAD_HEADER.as_str()).as_deref() {
        Some("true") => "cold load",
        _ => "warm",
    }
}

fn metadata(rsp: &tonic::Response<ModelInferResponse>, key: &str) -> Option<String> {
    let value = rsp.metadata().get(key)?;
    value.to_str().ok().map(str::to_owned)
}

/// Calls the balancer routed to a backend, in all.
fn routed(stats: &tower_model_balance::balance::BalanceStats) -> u64 {
    stats.resident_owner + stats.cold_owner + stats.spill + stats.panic + stats.update
}

fn pct(part: usize, whole: usize) -> f64 {
    100.0 * part as f64 / whole.max(1) as f64
}
