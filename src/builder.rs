//! [`ServiceBuilderModelExt`]: the crate's middleware as methods of tower's
//! [`ServiceBuilder`], one per layer.
//!
//! ```
//! use std::time::Duration;
//! use tower::{service_fn, ServiceBuilder, ServiceExt};
//! use tower_model_balance::breaker::BreakerConfig;
//! use tower_model_balance::hedge::HedgeConfig;
//! use tower_model_balance::ServiceBuilderModelExt;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), tower::BoxError> {
//! let backend = service_fn(|_req: http::Request<String>| async {
//!     Ok::<_, std::io::Error>(http::Response::new(String::from("ok")))
//! });
//! let stack = ServiceBuilder::new()
//!     // A backup after the model's p95, within a 5% budget; the closure
//!     // reports the fleet's utilization (here: never loaded).
//!     .hedge(HedgeConfig::default(), || 0.0)
//!     // Fails fast once half the recent calls failed.
//!     .circuit_breaker(BreakerConfig::builder().failure_rate_threshold(0.5).build()?)
//!     .timeout(Duration::from_secs(30))
//!     .service(backend);
//! // The hedge is on top: its counters are the stack's.
//! let hedges = stack.handle();
//!
//! let request = http::Request::post("/v2/models/resnet-50/infer")
//!     .header("x-model-id", "resnet-50")
//!     .body(String::new())?;
//! let response = stack.oneshot(request).await?;
//! assert_eq!(response.status(), 200);
//! assert_eq!(hedges.stats().warming_up, 1, "no delay before 20 samples");
//! # Ok(()) }
//! ```
//!
//! The hedge's backup goes to another backend only when a
//! [`ModelBalancer`](crate::balance::ModelBalancer) is below it (the
//! balancer reads the backup's `Exclude`); over a single service, as here,
//! the backup is a second call to that service.
//!
//! Each method adds the layer its documentation names, as
//! [`ServiceBuilder::layer`] would; a layer's handle (the hedge's
//! counters) is on the service it built; to set what a method does not take (another classifier,
//! another body limit), build the layer itself and pass it to `layer`.
//! The balancer is not a layer: it is the service at the bottom of the
//! stack, built from the backends a `tower::discover::Discover` yields
//! ([`ModelBalancer::new`](crate::balance::ModelBalancer::new)), as
//! tower's own `Balance` is.
//!
//! The trait is sealed: only [`ServiceBuilder`] implements it, so methods
//! can be added without a breaking change.
//!
//! It is named `ServiceBuilderModelExt`, not `ServiceBuilderExt`, so that
//! it imports beside tower-http's `ServiceBuilderExt` without a clash or a
//! rename (`use tower_http::ServiceBuilderExt;` and `use
//! tower_model_balance::ServiceBuilderModelExt;` in one module).

#[cfg(any(feature = "body", feature = "breaker", feature = "hedge"))]
use tower::layer::util::Stack;
use tower::ServiceBuilder;

#[cfg(feature = "breaker")]
use crate::breaker::{BreakerConfig, CircuitBreakerLayer};
#[cfg(feature = "hedge")]
use crate::hedge::{BufferRequestBodyLayer, HedgeConfig, HedgeLayer, LoadGate};
#[cfg(feature = "body")]
use crate::route::body::builder::ModelFromBodyLayer;

mod sealed {
    pub trait Sealed<L> {}
    impl<L> Sealed<L> for tower::ServiceBuilder<L> {}
}

/// The crate's layers as [`ServiceBuilder`] methods; see the
/// [module docs](self). Sealed: implemented for [`ServiceBuilder`] only.
pub trait ServiceBuilderModelExt<L>: sealed::Sealed<L> + Sized {
    /// Adds a [`ModelFromBodyLayer`] with its default body limit (1 MiB):
    /// the model ID from an OpenAI-style JSON body (`{"model": ...}`) or
    /// the KServe v2 path `/v2/models/{name}/infer`, into the request's
    /// extensions as a [`RouteInfo`](crate::route::RouteInfo). Over the
    /// limit, the service fails with
    /// [`PayloadTooLarge`](crate::error::PayloadTooLarge); no model ID, with
    /// [`InvalidRoute`](crate::error::InvalidRoute). Another limit:
    /// `.layer(ModelFromBodyLayer::builder().limit(bytes).build()?)`.
    #[cfg(feature = "body")]
    #[cfg_attr(docsrs, doc(cfg(feature = "body")))]
    fn model_from_body(self) -> ServiceBuilder<Stack<ModelFromBodyLayer, L>>;

    /// Adds a [`CircuitBreakerLayer`] with `policy` and the default HTTP
    /// classifier (5xx and errors fail, 429 overloads): one breaker shared
    /// by the clones of the service it wraps, failing fast with
    /// [`BreakerOpen`](crate::error::BreakerOpen) while open.
    #[cfg(feature = "breaker")]
    #[cfg_attr(docsrs, doc(cfg(feature = "breaker")))]
    fn circuit_breaker(
        self,
        policy: BreakerConfig,
    ) -> ServiceBuilder<Stack<CircuitBreakerLayer, L>>;

    /// Adds a [`HedgeLayer`] hedging by `policy`, sending no hedge while
    /// `gate` reports a utilization above the policy's
    /// [`max_utilization`](crate::hedge::HedgeConfigBuilder::max_utilization) (a
    /// [`BalancerLoad`](crate::hedge::BalancerLoad) over the balancer's
    /// handle, or any `Fn() -> f64`). Its counters are read through
    /// [`Hedge::handle`](crate::hedge::Hedge::handle) on the service built
    /// (`stack.get_ref().handle()` when the hedge is second from the top,
    /// as under `model_from_body`; `stack.handle()` when it is on top),
    /// or through [`HedgeLayer::handle`] when you build the layer and pass
    /// it to `layer`.
    #[cfg(feature = "hedge")]
    #[cfg_attr(docsrs, doc(cfg(feature = "hedge")))]
    fn hedge(
        self,
        policy: HedgeConfig,
        gate: impl LoadGate,
    ) -> ServiceBuilder<Stack<HedgeLayer, L>>;

    /// Adds a [`BufferRequestBodyLayer`] reading each request body whole,
    /// at most `limit_bytes` bytes, into an `http_body_util::Full<Bytes>`
    /// that a hedge below can copy (for a body that is not `Clone`:
    /// tonic's, hyper's `Incoming`). Over the limit, the service fails with
    /// [`PayloadTooLarge`](crate::error::PayloadTooLarge) and sends
    /// nothing.
    #[cfg(feature = "hedge")]
    #[cfg_attr(docsrs, doc(cfg(feature = "hedge")))]
    fn buffer_request_body(
        self,
        limit_bytes: usize,
    ) -> ServiceBuilder<Stack<BufferRequestBodyLayer, L>>;
}

impl<L> ServiceBuilderModelExt<L> for ServiceBuilder<L> {
    #[cfg(feature = "body")]
    fn model_from_body(self) -> ServiceBuilder<Stack<ModelFromBodyLayer, L>> {
        self.layer(ModelFromBodyLayer::new())
    }

    #[cfg(feature = "breaker")]
    fn circuit_breaker(
        self,
        policy: BreakerConfig,
    ) -> ServiceBuilder<Stack<CircuitBreakerLayer, L>> {
        self.layer(CircuitBreakerLayer::new(policy))
    }

    #[cfg(feature = "hedge")]
    fn hedge(
        self,
        policy: HedgeConfig,
        gate: impl LoadGate,
    ) -> ServiceBuilder<Stack<HedgeLayer, L>> {
        self.layer(HedgeLayer::with_load_gate(policy, gate))
    }

    #[cfg(feature = "hedge")]
    fn buffer_request_body(
        self,
        limit_bytes: usize,
    ) -> ServiceBuilder<Stack<BufferRequestBodyLayer, L>> {
        self.layer(BufferRequestBodyLayer::new(limit_bytes))
    }
}
