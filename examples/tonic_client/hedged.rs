//! The hedged client: a `ModelInfer` call that is slow on its backend is
//! sent again, after the model's latency percentile, to another backend,
//! and the first answer wins.
//!
//! ```text
//! InferenceClient ─► Grpc ─► BufferRequestBody ─► Hedge ──────────► map_request ─► ModelBalancer ─► Channel per backend
//!                    encodes  tonic's body read    a backup after     Full<Bytes> →   the backup's
//!                             whole (≤ 4 MiB)      the model's p95,   tonic's body    Exclude: another
//!                             into Full<Bytes>     BalancerLoad gate                  backend
//! ```
//!
//! tonic's request body is not `Clone`, so the hedge cannot copy the
//! request as tonic sends it: `BufferRequestBodyLayer` reads the encoded
//! message first (one frame for a unary call), up to a limit; below the
//! hedge the bytes go back into a `tonic::body::Body` for the channels.
//! A message over the limit is `RESOURCE_EXHAUSTED` (source
//! `PayloadTooLarge`), sent nowhere. The hedge reads `grpc-status` as the
//! balancer does (`GrpcErrorsAsFailures`): an `UNAVAILABLE` waits for the
//! other attempt, a `RESOURCE_EXHAUSTED` never sends a backup.

use bytes::Bytes;
use http_body_util::Full;
use tonic::client::Grpc;
use tower::util::MapRequest;
use tower::ServiceBuilder;
use tower_model_balance::classify::GrpcErrorsAsFailures;
use tower_model_balance::error::BoxError;
use tower_model_balance::hedge::{
    BalancerLoad, BufferRequestBody, BufferRequestBodyLayer, Hedge, HedgeConfig, HedgeHandle,
    HedgeLayer,
};

use crate::client::{balancer, Config, InferenceClient, Stack};

/// The most bytes of an encoded request the hedged client reads (4 MiB,
/// the largest message a gRPC server takes by default).
pub const MESSAGE_LIMIT: usize = 4 << 20;

/// Below the hedge: the buffered request back in tonic's body.
type ToTonic = fn(http::Request<Full<Bytes>>) -> http::Request<tonic::body::Body>;

/// The hedged request path under tonic's `Grpc` client.
pub type HedgedStack = BufferRequestBody<Hedge<MapRequest<Stack, ToTonic>, GrpcErrorsAsFailures>>;

/// How the client hedges.
#[derive(Debug, Clone)]
pub struct Hedging {
    /// When to send a backup, and how many.
    pub policy: HedgeConfig,
    /// The requests each backend serves at once: no backup while the
    /// balancer's calls in flight exceed the policy's share of
    /// `per_backend` × the backends.
    pub per_backend: usize,
    /// The most bytes of an encoded request read (default
    /// [`MESSAGE_LIMIT`]).
    pub message_limit: usize,
}

impl Hedging {
    /// Hedges by `policy`, 4 calls a backend, messages up to
    /// [`MESSAGE_LIMIT`].
    pub fn new(policy: HedgeConfig) -> Self {
        Self {
            policy,
            per_backend: 4,
            message_limit: MESSAGE_LIMIT,
        }
    }
}

impl InferenceClient<HedgedStack> {
    /// The client of [`InferenceClient::new`] with the hedge above the
    /// balancer, and the hedge's handle (its counters); inside a Tokio
    /// runtime.
    ///
    /// # Errors
    ///
    /// As [`InferenceClient::new`].
    pub fn hedged(config: &Config, hedging: &Hedging) -> Result<(Self, HedgeHandle), BoxError> {
        let balancer = balancer(config)?;
        let handle = balancer.handle();
        let gate = BalancerLoad::new(handle.clone(), hedging.per_backend);
        let hedge = HedgeLayer::with_load_gate(hedging.policy.clone(), gate)
            .classify(GrpcErrorsAsFailures::new());
        let hedges = hedge.handle();
        let to_tonic: ToTonic = |req| req.map(tonic::body::Body::new);
        let stack = ServiceBuilder::new()
            .layer(BufferRequestBodyLayer::new(hedging.message_limit))
            .layer(hedge)
            .map_request(to_tonic)
            .service(balancer);
        let client = Self {
            grpc: Grpc::new(stack),
            handle,
        };
        Ok((client, hedges))
    }
}
