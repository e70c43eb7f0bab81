//! The client: the crate's stack over one tonic `Channel` per backend,
//! speaking KServe v2's `ModelInfer`.
//!
//! ```text
//! InferenceClient ─► tonic::client::Grpc ─► ModelBalancer ─► per backend: breaker ─► Channel (HTTP/2, timeout) ─► backend
//!  model_name →        encodes the            affinity, reads                       grpc-status
//!  RouteInfo           message                grpc-status
//! ```
//!
//! The model ID is read from the typed `ModelInferRequest` **before it is
//! encoded** (KServe v2 puts `model_name` in the message, not in a header)
//! and travels as a `RouteInfo` in the request's extensions, which tonic
//! carries into the `http::Request` the balancer sees. A caller that
//! prefers metadata sets `x-model-id` (the crate's route header) instead:
//! metadata are HTTP/2 headers, and the balancer reads them when no
//! `RouteInfo` is there. The balancer reads each answer's `grpc-status`
//! (`Classifier::grpc()`): `UNAVAILABLE` fails, and three in a row
//! open the backend's breaker.

use std::time::Duration;

use prost::Message;
use tonic::client::{Grpc, GrpcService};
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;
use tower::discover::ServiceList;
use tower_model_balance::backend::{Backend, BackendId, BackendMeta};
use tower_model_balance::balance::{BalanceConfig, BalancerHandle, ModelBalancer, ResidencyHeader};
use tower_model_balance::breaker::BreakerConfig;
use tower_model_balance::classify::Classifier;
use tower_model_balance::error::BoxError;
use tower_model_balance::health::HealthConfig;
use tower_model_balance::route::{ModelId, RouteInfo};
use tower_model_balance_sim::protocol::RESIDENT_MODELS_HEADER;

use crate::errors;
use crate::kserve::{ModelInferRequest, ModelInferResponse, MODEL_INFER_PATH, SERVICE};

/// The whole request path under tonic's `Grpc` client.
pub type Stack = ModelBalancer<Channel>;

/// How the client is set up.
#[derive(Debug, Clone)]
pub struct Config {
    /// The backends: an ID and the `http://host:port` to dial.
    pub backends: Vec<(BackendId, String)>,
    /// The most a call may take, load included (a timeout inside the
    /// breaker: a hung call fails).
    pub timeout: Duration,
    /// Each backend's breaker (default: open after 3 failures in a row,
    /// the open time drawn with equal jitter in [2.5 s, 5 s]).
    pub breaker: BreakerConfig,
    /// Whether answers list the backend's resident models in
    /// `x-sim-resident-models` (the simulated servers do).
    pub residency_metadata: bool,
    /// How backend health is scored and when a backend is ejected.
    pub health: HealthConfig,
}

impl Config {
    /// Defaults for `backends`: a 10 s timeout, breakers that open after 3
    /// failures in a row, no residency metadata, the default health
    /// policy.
    pub fn new(backends: Vec<(BackendId, String)>) -> Self {
        let breaker = BreakerConfig::builder()
            .consecutive_failures(3)
            .build()
            .expect("a valid policy");
        Self {
            backends,
            timeout: Duration::from_secs(10),
            breaker,
            residency_metadata: false,
            health: HealthConfig::default(),
        }
    }
}

/// A KServe v2 gRPC client over the balanced stack `T` ([`Stack`], or the
/// hedged one of `hedged.rs`). `Clone` shares the balancer (its routing
/// state, breakers and connections).
#[derive(Debug, Clone)]
pub struct InferenceClient<T = Stack> {
    pub(crate) grpc: Grpc<T>,
    pub(crate) handle: BalancerHandle,
}

impl InferenceClient {
    /// One lazily connected `Channel` per backend under the balancer;
    /// inside a Tokio runtime.
    ///
    /// # Errors
    ///
    /// An address that is not a URI, or an invalid setting (the crate's
    /// `InvalidConfig` names it).
    pub fn new(config: &Config) -> Result<Self, BoxError> {
        let balancer = balancer(config)?;
        let handle = balancer.handle();
        Ok(Self {
            grpc: Grpc::new(balancer),
            handle,
        })
    }
}

/// The balancer over one `Channel` per backend of `config`.
pub fn balancer(config: &Config) -> Result<Stack, BoxError> {
    let mut backends = Vec::new();
    for (id, origin) in &config.backends {
        // One HTTP/2 connection per backend, made on first use and
        // remade by tonic if it drops; `timeout` bounds each call.
        let channel = Endpoint::from_shared(origin.clone())?
            .connect_timeout(Duration::from_secs(1))
            .timeout(config.timeout)
            .connect_lazy();
        let meta = BackendMeta::new(id.clone());
        backends.push(Backend::with_meta(meta, channel));
    }
    let mut balance = BalanceConfig::builder()
        .breaker(config.breaker.clone())
        .health(config.health.clone())
        // gRPC failures are an HTTP 200 with a `grpc-status`.
        .classifier(Classifier::grpc());
    if config.residency_metadata {
        let header = ResidencyHeader::ResidentModels(RESIDENT_MODELS_HEADER);
        balance = balance.residency_header(header);
    }
    ModelBalancer::new(ServiceList::new(backends), balance.build()?)
}

impl<T> InferenceClient<T>
where
    T: GrpcService<tonic::body::Body>,
    T::ResponseBody: tonic::codegen::Body + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<BoxError>,
{
    /// The balancer's handle: counters, backends, breakers.
    pub fn handle(&self) -> &BalancerHandle {
        &self.handle
    }

    /// `ModelInfer`, routed by the message's `model_name`.
    ///
    /// # Errors
    ///
    /// `INVALID_ARGUMENT` for a `model_name` that is no valid model ID
    /// (empty, say: its source is the crate's `InvalidRoute`), before
    /// anything is sent; `UNAVAILABLE` when no backend can take the call
    /// (source `NoHealthyBackend`); else the backend's own status.
    pub async fn model_infer(
        &mut self,
        request: impl tonic::IntoRequest<ModelInferRequest>,
    ) -> Result<Response<ModelInferResponse>, Status> {
        let mut request = request.into_request();
        let route = route_of(request.get_ref())?;
        request.extensions_mut().insert(route);
        self.call(request).await
    }

    /// `ModelInfer`, routed by the request's metadata (`x-model-id`, and
    /// optionally `x-request-kind`, `x-urgency`) — for callers that set the
    /// model ID in metadata already (a proxy, a client in another
    /// language); the message is not read.
    ///
    /// # Errors
    ///
    /// `INVALID_ARGUMENT` when `x-model-id` is missing or invalid; the
    /// rest as [`InferenceClient::model_infer`].
    pub async fn model_infer_by_metadata(
        &mut self,
        request: Request<ModelInferRequest>,
    ) -> Result<Response<ModelInferResponse>, Status> {
        self.call(request).await
    }

    async fn call(
        &mut self,
        mut request: Request<ModelInferRequest>,
    ) -> Result<Response<ModelInferResponse>, Status> {
        request
            .extensions_mut()
            .insert(tonic::GrpcMethod::new(SERVICE, "ModelInfer"));
        self.grpc
            .ready()
            .await
            .map_err(|e| Status::unavailable(format!("client not ready: {}", e.into())))?;
        let codec = ProstCodec::<ModelInferRequest, ModelInferResponse>::default();
        let path = http::uri::PathAndQuery::from_static(MODEL_INFER_PATH);
        self.grpc
            .unary(request, path, codec)
            .await
            .map_err(errors::status)
    }
}

/// The route of a `ModelInferRequest`, from the typed message: its
/// `model_name` as the model ID, its encoded size as the payload.
///
/// # Errors
///
/// `INVALID_ARGUMENT` naming `model_name`, the crate's `InvalidRoute` as
/// its source.
pub fn route_of(message: &ModelInferRequest) -> Result<RouteInfo, Status> {
    let model = ModelId::new(&message.model_name).map_err(errors::invalid_model_name)?;
    let size = u64::try_from(message.encoded_len()).unwrap_or(u64::MAX);
    let mut route = RouteInfo::new(model);
    route.payload_bytes = Some(size);
    Ok(route)
}
