//! What discovery yields: a backend's metadata ([`BackendMeta`]) paired
//! with its endpoint ([`Backend`]).

use super::id::BackendId;
use crate::endpoint::Origin;
use crate::error::common::InvalidConfig;
use crate::route::ModelId;

/// Metadata of one backend.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackendMeta {
    /// The backend's identity on the ring.
    pub(crate) id: BackendId,
    /// Relative share of the ring, 1 ..= 10 000. Default 1.
    pub(crate) weight: u32,
    /// How many models the backend keeps resident at once. Default 4.
    pub(crate) model_slots: usize,
    /// Models declared resident when the backend is inserted.
    pub(crate) resident_models: Vec<ModelId>,
    /// Where the backend is reached, for probes. Default none.
    pub(crate) address: Option<Origin>,
    /// Where its metrics are served, when not at `address`. Default none.
    pub(crate) metrics_address: Option<Origin>,
    /// The backend's GPU memory in bytes. Default unknown.
    pub(crate) gpu_memory_bytes: Option<u64>,
}

impl BackendMeta {
    /// The backend's identity on the ring.
    pub fn id(&self) -> &BackendId {
        &self.id
    }

    /// The backend's relative share of the ring.
    pub fn weight(&self) -> u32 {
        self.weight
    }

    /// How many models the backend keeps resident at once.
    pub fn model_slots(&self) -> usize {
        self.model_slots
    }

    /// The models declared resident.
    pub fn resident_models(&self) -> &[ModelId] {
        &self.resident_models
    }

    /// Metadata for `id` with weight 1, 4 model slots and no model
    /// declared resident.
    pub fn new(id: BackendId) -> Self {
        Self {
            id,
            weight: 1,
            model_slots: Self::DEFAULT_MODEL_SLOTS,
            resident_models: Vec::new(),
            address: None,
            metrics_address: None,
            gpu_memory_bytes: None,
        }
    }

    /// Where the backend is reached, if discovery said.
    pub fn address(&self) -> Option<&Origin> {
        self.address.as_ref()
    }

    /// Sets where the backend is reached: the origin its active health
    /// probes are sent to (see [`crate::health`]). Without one a backend is
    /// not probed, only judged by its requests' outcomes.
    pub fn with_address(mut self, address: Origin) -> Self {
        self.address = Some(address);
        self
    }

    /// Where the backend serves its Prometheus metrics, if not at its
    /// [`address`](Self::address).
    pub fn metrics_address(&self) -> Option<&Origin> {
        self.metrics_address.as_ref()
    }

    /// Sets where the backend serves its Prometheus metrics, when that is
    /// not its [`address`](Self::with_address): MLServer serves them on a
    /// port of their own (`metrics_port`, default 8082), Triton on 8002.
    /// [`PrometheusMetrics`](crate::health::probe::PrometheusMetrics)
    /// probes ask this origin's `/metrics`.
    pub fn with_metrics_address(mut self, address: Origin) -> Self {
        self.metrics_address = Some(address);
        self
    }

    /// The backend's GPU memory in bytes, if discovery said.
    pub fn gpu_memory_bytes(&self) -> Option<u64> {
        self.gpu_memory_bytes
    }

    /// Sets the backend's total GPU memory in bytes: the capacity a probe's
    /// used-memory figure is measured against when the server does not
    /// report its total.
    pub fn with_gpu_memory(mut self, bytes: u64) -> Self {
        self.gpu_memory_bytes = Some(bytes);
        self
    }

    /// Default [`BackendMeta::model_slots`].
    pub const DEFAULT_MODEL_SLOTS: usize = 4;
    /// Largest accepted [`BackendMeta::model_slots`].
    pub const MAX_MODEL_SLOTS: usize = 16;

    /// Sets how many models the backend keeps resident at once (its GPU
    /// memory's worth; 1 ..= 16, default 4). The balancer learns residency
    /// from the requests it routes — a model sent to a backend is resident
    /// there — and forgets a model once this many others were sent there
    /// since, as the server's LRU would evict it.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming `model_slots` when outside 1 ..= 16.
    pub fn with_model_slots(mut self, slots: usize) -> Result<Self, InvalidConfig> {
        if !(1..=Self::MAX_MODEL_SLOTS).contains(&slots) {
            return Err(InvalidConfig::new("model_slots", "1 ..= 16"));
        }
        self.model_slots = slots;
        Ok(self)
    }

    /// Declares the models resident on the backend when it is inserted
    /// (the first `model_slots` are kept). An `Insert` for a live key with
    /// a non-empty list replaces what the balancer had learned.
    pub fn with_resident_models(mut self, models: impl IntoIterator<Item = ModelId>) -> Self {
        self.resident_models = models.into_iter().collect();
        self
    }

    /// Largest accepted weight.
    pub const MAX_WEIGHT: u32 = 10_000;

    /// Sets the weight: the backend's share of the ring relative to the
    /// others (a backend of weight 2 owns about twice the models of one of
    /// weight 1).
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming `weight` when it is outside
    /// 1 ..= [`BackendMeta::MAX_WEIGHT`].
    pub fn with_weight(mut self, weight: u32) -> Result<Self, InvalidConfig> {
        if !(1..=Self::MAX_WEIGHT).contains(&weight) {
            return Err(InvalidConfig::new("weight", "1 ..= 10000"));
        }
        self.weight = weight;
        Ok(self)
    }
}

/// A backend as discovery yields it: metadata and the endpoint `E` (the
/// `Service` that sends requests to this backend, cloned per request).
///
/// `tower::discover::Change::Insert(key, Backend<E>)` for a live key updates
/// metadata and endpoint and keeps the backend's breaker and in-flight count.
/// An insert is ignored, with a `tracing` warning, when its ID is already
/// in use under another key, or when it would take the ring past
/// [`MAX_POINTS`](crate::ring::MAX_POINTS) points.
#[derive(Debug, Clone)]
pub struct Backend<E> {
    /// The backend's metadata.
    pub meta: BackendMeta,
    /// The endpoint.
    pub endpoint: E,
}

impl<E> Backend<E> {
    /// A backend of weight 1.
    pub fn new(id: BackendId, endpoint: E) -> Self {
        Self {
            meta: BackendMeta::new(id),
            endpoint,
        }
    }

    /// A backend with the given metadata.
    pub fn with_meta(meta: BackendMeta, endpoint: E) -> Self {
        Self { meta, endpoint }
    }
}

/// A backend is a service too: it forwards to its endpoint, so sources such
/// as `tower::discover::ServiceList` accept it. It keeps no readiness of
/// its own: the endpoint's contract applies (the crate's
/// [readiness contract](crate#readiness)).
impl<E, Req> tower_service::Service<Req> for Backend<E>
where
    E: tower_service::Service<Req>,
{
    type Response = E::Response;
    type Error = E::Error;
    type Future = E::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.endpoint.poll_ready(cx)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        self.endpoint.call(req)
    }
}
