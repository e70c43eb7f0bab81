//! The tonic client example's stack (examples/tonic_client, the same code
//! the example runs): KServe v2 `ModelInfer` through `tonic::client::Grpc`
//! over the model-aware balancer and one tonic `Channel` per backend, to
//! the example's tonic servers on loopback. No sleeps: every wait is on an
//! answer, and loops are bounded by a count.

use crate::client;
use crate::kserve;
use crate::server;

use std::error::Error;
use std::time::Duration;

use tonic::metadata::MetadataKey;
use tonic::{Code, Response, Status};
use tower_model_balance::backend::BackendId;
use tower_model_balance::breaker::{BreakerConfig, BreakerState};
use tower_model_balance::error::{InvalidReason, InvalidRoute};
use tower_model_balance::health::HealthConfig;
use tower_model_balance::ring::{Ring, RingConfig};
use tower_model_balance::route::{ModelId, MODEL_ID_HEADER};
use tower_model_balance_sim::protocol::{BACKEND_HEADER, COLD_LOAD_HEADER};

use client::{Config, InferenceClient};
use kserve::{InferInputTensor, InferTensorContents, ModelInferRequest, ModelInferResponse};
use server::{GrpcModelServer, ServerConfig, ServerStats};

/// Servers `{name}-0`, `{name}-1`, … and a client over them.
struct Fleet {
    servers: Vec<GrpcModelServer>,
    client: InferenceClient,
}

async fn fleet(name: &str, n: usize) -> Fleet {
    let config = ServerConfig {
        slots: 3,
        cold_load: Duration::from_millis(5),
    };
    let mut servers = Vec::new();
    for i in 0..n {
        let server = GrpcModelServer::start(&format!("{name}-{i}"), config)
            .await
            .unwrap();
        servers.push(server);
    }
    let backends = servers.iter().map(|s| s.backend().unwrap()).collect();
    let mut config = Config::new(backends);
    config.residency_metadata = true;
    // Health never ejects here: the breaker alone must take a failing
    // backend out, whenever the health task runs.
    config.health = HealthConfig::builder()
        .max_ejected_share(0.0)
        .build()
        .unwrap();
    // Open means open for the whole test: no full jitter, which could draw
    // an open time of a few milliseconds and let a probe through.
    config.breaker = BreakerConfig::builder()
        .consecutive_failures(3)
        .jitter(false)
        .open_duration(Duration::from_secs(60))
        .build()
        .unwrap();
    let client = InferenceClient::new(&config).unwrap();
    Fleet { servers, client }
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

    fn total(&self) -> ServerStats {
        let mut total = ServerStats::default();
        for s in &self.servers {
            let st = s.stats();
            total.served += st.served;
            total.cold_loads += st.cold_loads;
            total.failed += st.failed;
        }
        total
    }

    /// The model's backends in ring order (the balancer's default ring).
    fn walk(&self, model: &str) -> Vec<String> {
        let members = self
            .servers
            .iter()
            .map(|s| (BackendId::new(s.name()).unwrap(), 1));
        let ring = Ring::build(&RingConfig::default(), members).unwrap();
        let key = ModelId::new(model).unwrap().hash64();
        ring.walk(key)
            .map(|i| self.servers[i].name().to_owned())
            .collect()
    }
}

fn served_by<T>(rsp: &Response<T>) -> &str {
    rsp.metadata()
        .get(BACKEND_HEADER.as_str())
        .unwrap()
        .to_str()
        .unwrap()
}

fn cold<T>(rsp: &Response<T>) -> bool {
    rsp.metadata().get(COLD_LOAD_HEADER.as_str()).unwrap() == "true"
}

#[tokio::test]
async fn a_model_goes_to_its_owner_and_stays_warm() {
    let f = fleet("warm", 3).await;
    let owner = f.walk("resnet-50")[0].clone();
    let first = f
        .infer(ModelInferRequest::fp32("resnet-50", "1", &[1.0]))
        .await
        .unwrap();
    assert_eq!(served_by(&first), owner, "the ring's first owner loads it");
    assert!(cold(&first));
    for i in 2..=4 {
        let again = f
            .infer(ModelInferRequest::fp32("resnet-50", &i.to_string(), &[1.0]))
            .await
            .unwrap();
        assert_eq!(served_by(&again), owner, "call {i}");
        assert!(!cold(&again), "call {i} is warm");
    }
    assert_eq!(
        f.server(&owner).stats(),
        ServerStats {
            served: 4,
            cold_loads: 1,
            failed: 0
        }
    );
    assert_eq!(f.total().served, 4, "no other server saw it");
    let handle = f.client.handle();
    let stats = handle.stats();
    assert_eq!(
        (stats.cold_owner, stats.resident_owner, stats.spill),
        (1, 3, 0)
    );
    // Each answer ended with `grpc-status: 0` in its trailers: read as
    // successes (a body ending without a status would be a failure).
    assert_eq!(handle.in_flight(), 0);
    for backend in handle.backends() {
        assert_eq!(backend.failures, 0, "{}", backend.id);
        assert_eq!(backend.breaker, BreakerState::Closed);
    }
}

#[tokio::test]
async fn metadata_routes_as_the_message_does() {
    let f = fleet("meta", 3).await;
    let owner = f.walk("bert-base")[0].clone();
    let key = MetadataKey::from_bytes(MODEL_ID_HEADER.as_str().as_bytes()).unwrap();
    for i in 0..2 {
        // `model_name` says otherwise: metadata alone routes this call.
        let mut req = tonic::Request::new(ModelInferRequest::fp32("other", &i.to_string(), &[1.0]));
        req.metadata_mut()
            .insert(key.clone(), "bert-base".parse().unwrap());
        let mut client = f.client.clone();
        let rsp = client.model_infer_by_metadata(req).await.unwrap();
        assert_eq!(served_by(&rsp), owner);
        assert_eq!(cold(&rsp), i == 0);
    }
    // No metadata at all: the balancer's InvalidRoute, as INVALID_ARGUMENT.
    let req = tonic::Request::new(ModelInferRequest::fp32("resnet-50", "x", &[1.0]));
    let mut client = f.client.clone();
    let status = client.model_infer_by_metadata(req).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    let source = status
        .source()
        .and_then(|s| s.downcast_ref::<InvalidRoute>());
    let source = source.expect("InvalidRoute");
    assert_eq!(
        (source.source, source.reason),
        ("x-model-id", InvalidReason::Missing)
    );
    assert_eq!(f.client.handle().stats().invalid_route, 1);
    assert_eq!(f.total().served, 2);
}

#[tokio::test]
async fn an_empty_model_name_is_invalid_argument_and_nothing_is_sent() {
    let f = fleet("empty", 2).await;
    for name in ["", "two words"] {
        let status = f
            .infer(ModelInferRequest::fp32(name, "bad", &[1.0]))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{name:?}: {status:?}");
        assert!(
            status.message().starts_with("model_name: "),
            "{}",
            status.message()
        );
        let source = status
            .source()
            .and_then(|s| s.downcast_ref::<InvalidRoute>());
        assert_eq!(source.expect("InvalidRoute").source, "model");
    }
    let status = f
        .infer(ModelInferRequest::fp32("", "bad", &[1.0]))
        .await
        .unwrap_err();
    let reason = status
        .source()
        .and_then(|s| s.downcast_ref::<InvalidRoute>())
        .unwrap()
        .reason;
    assert_eq!(reason, InvalidReason::Empty);
    assert_eq!(f.total(), ServerStats::default(), "no server saw a call");
    let stats = f.client.handle().stats();
    assert_eq!(
        stats.resident_owner + stats.cold_owner + stats.spill + stats.panic,
        0
    );
}

#[tokio::test]
async fn tensor_contents_round_trip() {
    let f = fleet("tensor", 2).await;
    let fp32 = InferInputTensor {
        name: "input0".into(),
        datatype: "FP32".into(),
        shape: vec![2, 2],
        contents: Some(InferTensorContents {
            fp32_contents: vec![0.5, -1.25, 3.0, 1e-3],
            ..Default::default()
        }),
        ..Default::default()
    };
    let int64 = InferInputTensor {
        name: "input1".into(),
        datatype: "INT64".into(),
        shape: vec![3],
        contents: Some(InferTensorContents {
            int64_contents: vec![-7, 0, i64::MAX],
            ..Default::default()
        }),
        ..Default::default()
    };
    let bytes = InferInputTensor {
        name: "input2".into(),
        datatype: "BYTES".into(),
        shape: vec![2],
        contents: Some(InferTensorContents {
            bytes_contents: vec![b"hello".to_vec(), vec![0, 255]],
            ..Default::default()
        }),
        ..Default::default()
    };
    let req = ModelInferRequest {
        model_name: "clip-vit".into(),
        id: "req-42".into(),
        inputs: vec![fp32, int64, bytes],
        ..Default::default()
    };
    let rsp = f.infer(req).await.unwrap().into_inner();
    assert_eq!(
        (rsp.model_name.as_str(), rsp.id.as_str()),
        ("clip-vit", "req-42")
    );
    let names: Vec<_> = rsp.outputs.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["output0", "output1", "output2"]);
    let contents = |i: usize| rsp.outputs[i].contents.clone().unwrap();
    // The simulated model doubles numbers (exactly, in binary floating
    // point) and echoes bytes.
    assert_eq!(rsp.outputs[0].shape, [2, 2]);
    assert_eq!(rsp.outputs[0].datatype, "FP32");
    assert_eq!(contents(0).fp32_contents, [1.0, -2.5, 6.0, 2e-3]);
    assert_eq!(contents(1).int64_contents, [-14, 0, i64::MAX]);
    assert_eq!(
        contents(2).bytes_contents,
        [b"hello".to_vec(), vec![0, 255]]
    );
}

#[tokio::test]
async fn an_unavailable_backend_fails_and_its_breaker_opens() {
    let f = fleet("down", 3).await;
    let models: Vec<String> = (0..9).map(|i| format!("model-{i}")).collect();
    // Where each model lives: one call each, one at a time (a model of
    // nine has one owner).
    let mut owned = Vec::new();
    let victim = f.walk(&models[0])[0].clone();
    for model in &models {
        let rsp = f
            .infer(ModelInferRequest::fp32(model, "warm-up", &[1.0]))
            .await
            .unwrap();
        if served_by(&rsp) == victim {
            owned.push(model.clone());
        }
    }
    assert!(!owned.is_empty());
    f.server(&victim).set_fault(Some(Code::Unavailable));

    // The victim's models, in turn: UNAVAILABLE (the server's, passed
    // through) until three in a row open its breaker; then served
    // elsewhere.
    let handle = f.client.handle();
    let victim_status = || {
        handle
            .backends()
            .into_iter()
            .find(|b| b.id.as_str() == victim)
            .unwrap()
    };
    let mut unavailable = 0;
    let mut sent = 0;
    while victim_status().breaker == BreakerState::Closed {
        let model = &owned[sent % owned.len()];
        let status = f
            .infer(ModelInferRequest::fp32(model, "fail", &[1.0]))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert!(
            status.message().contains("is failing"),
            "the server's own status: {status:?}"
        );
        unavailable += 1;
        sent += 1;
        assert!(
            sent <= 10,
            "the breaker never opened: {:?}",
            victim_status()
        );
    }
    assert_eq!(unavailable, 3, "three failures in a row open it");
    let status = victim_status();
    assert_eq!(status.breaker, BreakerState::Open);
    assert_eq!((status.failures, status.breaker_trips), (3, 1));
    assert_eq!(f.server(&victim).stats().failed, 3);

    // Open: its models go to their next owner, which serves them.
    for model in &owned {
        let rsp = f
            .infer(ModelInferRequest::fp32(model, "moved", &[1.0]))
            .await
            .unwrap();
        assert_ne!(served_by(&rsp), victim);
    }
    assert_eq!(f.server(&victim).stats().failed, 3, "no call reached it");
    for backend in handle.backends() {
        if backend.id.as_str() != victim {
            assert_eq!(backend.failures, 0, "{}", backend.id);
        }
    }
}
