//! What discovery yields: a backend's metadata paired with its endpoint.

use crate::backend::BackendId;
use crate::error::InvalidConfig;

/// Metadata of one backend.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackendMeta {
    /// The backend's identity on the ring.
    pub(crate) id: BackendId,
    /// Relative share of the ring, 1 ..= 10 000. Default 1.
    pub(crate) weight: u32,
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

    /// Metadata for `id` with weight 1.
    pub fn new(id: BackendId) -> Self {
        Self { id, weight: 1 }
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
/// as `tower::discover::ServiceList` accept it.
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
