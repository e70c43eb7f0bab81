//! The tonic client example's hedged stack (examples/tonic_client/hedged.rs,
//! the code the example runs): `ModelInfer` through `tonic::client::Grpc`,
//! `BufferRequestBody`, the hedge and the balancer, over one tonic
//! `Channel` per backend, to two of the example's tonic servers on
//! loopback, one of which stalls. A stalled server holds its calls until
//! released (no sleep stands for it); the waits are the hedge's own: its
//! delay (20 ms) and the refresh of that delay (at most every 100 ms),
//! waited for by reading the hedge's handle, bounded.

use crate::client;
use crate::hedged;
use crate::kserve;
use crate::server;

use std::error::Error;
use std::time::Duration;

use tonic::{Code, Response, Status};
use tower_model_balance::error::PayloadTooLarge;
use tower_model_balance::hedge::{HedgeConfig, HedgeHandle};
use tower_model_balance::route::ModelId;
use tower_model_balance_sim::protocol::BACKEND_HEADER;

use client::{Config, InferenceClient};
use hedged::{HedgedStack, Hedging};
use kserve::{ModelInferRequest, ModelInferResponse};
use server::{GrpcModelServer, ServerConfig};

/// Samples a model needs before its calls are hedged.
const WARM: usize = 5;

struct Fleet {
    servers: Vec<GrpcModelServer>,
    client: InferenceClient<HedgedStack>,
    hedges: HedgeHandle,
}

/// Two servers `{name}-0`, `{name}-1` and a hedged client over them: a
/// backup after 20 ms once a model has `WARM` samples; messages up to
/// `message_limit` bytes.
async fn fleet(name: &str, message_limit: usize) -> Fleet {
    let config = ServerConfig {
        slots: 3,
        cold_load: Duration::from_millis(5),
    };
    let mut servers = Vec::new();
    for i in 0..2 {
        let server = GrpcModelServer::start(&format!("{name}-{i}"), config)
            .await
            .unwrap();
        servers.push(server);
    }
    let backends = servers.iter().map(|s| s.backend().unwrap()).collect();
    let mut config = Config::new(backends);
    config.residency_metadata = true;
    let policy = HedgeConfig::builder()
        .min_samples(WARM as u64)
        .floor(Duration::from_millis(20))
        .ceiling(Duration::from_millis(20))
        .build()
        .unwrap();
    let mut hedging = Hedging::new(policy);
    hedging.message_limit = message_limit;
    let (client, hedges) = InferenceClient::hedged(&config, &hedging).unwrap();
    Fleet {
        servers,
        client,
        hedges,
    }
}

impl Fleet {
    /// `ModelInfer`, bounded: fails the test rather than hang.
    async fn infer(&self, req: ModelInferRequest) -> Result<Response<ModelInferResponse>, Status> {
        let mut client = self.client.clone();
        tokio::time::timeout(Duration::from_secs(10), client.model_infer(req))
            .await
            .expect("answered within 10 s")
    }

    fn server(&self, name: &str) -> &GrpcModelServer {
        self.servers.iter().find(|s| s.name() == name).unwrap()
    }
}

fn served_by<T>(rsp: &Response<T>) -> String {
    let value = rsp.metadata().get(BACKEND_HEADER.as_str()).unwrap();
    value.to_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_stalled_backends_calls_are_answered_by_the_backup() {
    let f = fleet("stall", hedged::MESSAGE_LIMIT).await;
    // Warm: the model's owner serves it (learned from these successes)
    // and the hedge gets its samples.
    let mut owners = Vec::new();
    for i in 0..WARM {
        let req = ModelInferRequest::fp32("resnet-50", &format!("warm-{i}"), &[1.0]);
        owners.push(served_by(&f.infer(req).await.unwrap()));
    }
    let owner = owners[0].clone();
    assert!(owners.iter().all(|o| *o == owner), "{owners:?}");
    let other = f.servers.iter().find(|s| s.name() != owner).unwrap();
    assert_eq!(other.stats().served, 0);
    let before = f.hedges.stats();
    assert_eq!((before.requests, before.hedges), (WARM as u64, 0));
    // The hedge recomputes a model's delay at most every 100 ms: wait
    // (bounded) until it has taken the samples in.
    let model = ModelId::new("resnet-50").unwrap();
    for _ in 0..100 {
        if f.hedges.delay(&model).is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(f.hedges.delay(&model), Some(Duration::from_millis(20)));

    // The owner stalls: each call's backup, 20 ms on, is answered by the
    // other server.
    let stalled = f.server(&owner);
    stalled.hold();
    const CALLS: usize = 3;
    for i in 0..CALLS {
        let values = [i as f32, -1.5];
        let id = format!("hedged-{i}");
        let rsp = f
            .infer(ModelInferRequest::fp32("resnet-50", &id, &values))
            .await
            .unwrap_or_else(|e| panic!("call {i}: {e:?}; {:?}", f.hedges.stats()));
        assert_eq!(served_by(&rsp), other.name(), "call {i}");
        let rsp = rsp.into_inner();
        assert_eq!(
            (rsp.model_name.as_str(), rsp.id.as_str()),
            ("resnet-50", id.as_str())
        );
        let out = rsp.outputs[0].contents.as_ref().unwrap();
        assert_eq!(out.fp32_contents, [2.0 * i as f32, -3.0], "call {i}");
    }
    let stats = f.hedges.stats();
    stalled.release();
    println!(
        "hedge stats: {stats:?}; held by {owner}: {}",
        stalled.held_calls()
    );
    assert_eq!(stats.requests, (WARM + CALLS) as u64);
    assert!(stats.hedges >= 1, "{stats:?}");
    assert!(stats.hedges_won >= 1, "{stats:?}");
    assert_eq!(
        other.stats().served,
        CALLS as u64,
        "every answer was the other's"
    );
    assert_eq!(
        stalled.stats().served,
        WARM as u64,
        "the stalled server answered none"
    );
    assert_eq!(stats.suppressed_by_load + stats.suppressed_by_budget, 0);
}

#[tokio::test]
async fn a_message_over_the_limit_is_resource_exhausted_and_not_sent() {
    let f = fleet("limit", 1024).await;
    // 400 floats: 1 600 bytes of contents, over 1 KiB encoded.
    let values = vec![0.5_f32; 400];
    let status = f
        .infer(ModelInferRequest::fp32("resnet-50", "big", &values))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    let source = status
        .source()
        .and_then(|s| s.downcast_ref::<PayloadTooLarge>());
    assert_eq!(source, Some(&PayloadTooLarge::new(1024)), "{status:?}");
    for server in &f.servers {
        assert_eq!(
            server.stats().served + server.stats().failed,
            0,
            "{}",
            server.name()
        );
    }
    let routed = f.client.handle().stats();
    assert_eq!(
        routed.resident_owner + routed.cold_owner + routed.spill + routed.panic,
        0
    );
    assert_eq!(f.hedges.stats().requests, 0, "the hedge never saw it");

    // A message under the limit goes through.
    let rsp = f
        .infer(ModelInferRequest::fp32("resnet-50", "small", &[1.0]))
        .await
        .unwrap();
    assert_eq!(
        rsp.into_inner().outputs[0]
            .contents
            .as_ref()
            .unwrap()
            .fp32_contents,
        [2.0]
    );
}
