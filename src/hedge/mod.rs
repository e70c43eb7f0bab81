//! Hedged requests: a backup attempt when the first is slow, to another
//! backend, within a budget, and never while the fleet is overloaded.
//!
//! ```
//! use std::time::Duration;
//!
//! use tower::{discover::ServiceList, service_fn, ServiceBuilder, ServiceExt};
//! use tower_model_balance::backend::{Backend, BackendId};
//! use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
//! use tower_model_balance::hedge::{BalancerLoad, HedgeLayer, HedgeConfig};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), tower::BoxError> {
//! let backends = ["gpu-0", "gpu-1", "gpu-2"].map(|name| {
//!     let endpoint = service_fn(move |_req: http::Request<String>| async move {
//!         Ok::<_, std::io::Error>(http::Response::new(name.to_string()))
//!     });
//!     Backend::new(BackendId::new(name).unwrap(), endpoint)
//! });
//! let balancer = ModelBalancer::new(ServiceList::new(backends), BalanceConfig::default())?;
//!
//! // Hedge after each model's p95, at most 5% extra requests, and not while
//! // the balancer's in-flight requests exceed 80% of 3 backends × 4 slots.
//! let policy = HedgeConfig::builder().ceiling(Duration::from_secs(1)).build()?;
//! let layer = HedgeLayer::with_load_gate(policy, BalancerLoad::new(balancer.handle(), 4));
//! let hedges = layer.handle();
//! let client = ServiceBuilder::new().layer(layer).service(balancer);
//!
//! let request = http::Request::post("/v2/models/llama-3-8b/infer")
//!     .header("x-model-id", "llama-3-8b")
//!     .body(String::new())?;
//! let response = client.oneshot(request).await?;
//! assert_eq!(response.status(), 200);
//! assert_eq!(hedges.stats().requests, 1);
//! assert_eq!(hedges.stats().hedges, 0, "20 samples of the model first");
//! # Ok(()) }
//! ```
//!
//! # How
//!
//! Dean and Barroso's hedged requests ("The Tail at Scale", CACM 2013):
//! send the request, and if it has not answered by the time most requests
//! have (the model's p95 by default), send a copy elsewhere and take
//! whichever answers first. With the delay at p95 the copies add about 5%
//! load and cut the tail that a slow node, a GC pause or a queue behind a
//! cold load adds. Here:
//!
//! * **Delay**: a latency percentile per model (the model read from the
//!   request's `RouteInfo` extension or headers, as the balancer reads it),
//!   over a rotating window, at most a multiple of its median (2×: a model
//!   served by one degraded backend has its p95 in the slow mode, where a
//!   hedge comes too late), clamped to a floor and a ceiling, once a model
//!   has a minimum of samples. Only successes and superseded first attempts
//!   (how long they ran before the backup won) feed it: fast failures must
//!   not pull the delay down, and the slow answers a hedge cuts short must
//!   not vanish from it. See [`HedgeConfig`].
//! * **Budget**: hedges (and the retries of a [`RetryPolicy`] built from
//!   the layer) are at most a share of the requests (5%) over a sliding
//!   window. An empty budget only stops a backup; the first attempt runs
//!   on.
//! * **Load gate**: no hedge while a [`LoadGate`] (for the balancer,
//!   [`BalancerLoad`]) reports utilization above the policy's maximum —
//!   hedging during an overload adds load where there is no room for it.
//! * **Another backend**: the first attempt carries a
//!   [`PickedSlot`](crate::backend::PickedSlot) where the balancer writes
//!   its pick; the backup carries an [`Exclude`](crate::backend::Exclude)
//!   of it, and the balancer sends it where a copy can help: a backend
//!   serving the model (the cheapest such owner, else the first past the
//!   owners); else, when the first attempt went where the model was served
//!   (a warm request that is slow), the next backend along the ring whose
//!   models it has no list of (no probe, no residency header, no declared
//!   models) — so a stack with no residency source hedges to the next
//!   owner. A first attempt sent cold (its backend loading the model) is
//!   raced only where the model is served: a backup that loads it again
//!   elsewhere races a load with a load and evicts a model in use there.
//!   With nowhere to go the balancer refuses the backup
//!   ([`NoAlternative`](crate::error::NoAlternative), counted in
//!   [`HedgeStats::suppressed_by_no_alternative`], its budget given back).
//! * **Outcome**: the first *answer* wins, as the breaker's classifier
//!   family ([`classify`](crate::classify)) says: by default
//!   ([`ServerErrorsAsFailures`](crate::classify::ServerErrorsAsFailures),
//!   see [`HedgeLayer::classify`]) a 5xx is a failure, a 429 an overload,
//!   and the rest (a caller's 4xx included) an answer. A failure or an
//!   overload waits for the other attempt, and the last is returned when
//!   neither answered. A first attempt that fails (a response the
//!   classifier calls a failure, or an error other than the balancer's
//!   refusals) before its backup's delay sends the backup at once, as a
//!   retry that avoids its backend, if the load gate and the budget allow
//!   (gRPC's hedging, gRFC A6; counted in
//!   [`HedgeStats::hedges_after_failure`]); else it is returned at once.
//!   An overload never sends a backup: it is returned at once.
//!   Otherwise a backup is sent only while no attempt has answered: never
//!   after a response has begun. The loser's
//!   future is dropped, which cancels its request down to the connection
//!   (HTTP/2: a reset stream; HTTP/1: the connection is closed). A first
//!   attempt that lost is no failure of its backend: the balancer counts
//!   it a slow call (see [`Guard`](crate::balance::Guard)).
//! * Updates (`x-request-kind: update`) are never hedged: a write is not
//!   idempotent. Nor is a request marked
//!   [`SendOnce`](crate::route::SendOnce) (a Responses API call that
//!   stores its answer, say): its latency is timed as its model's, and it
//!   is sent once ([`HedgeStats::send_once`]); a [`RetryPolicy`] sends it
//!   again only when its connection was refused. Requests whose route
//!   cannot be read share one histogram.
//! * **Accounting**: every request is counted in [`HedgeStats`] as hedged
//!   or, for one reason, not ([`HedgeStats::not_hedged`]); read them
//!   through [`HedgeLayer::handle`], or [`Hedge::handle`] on the built
//!   service (`stack.get_ref().handle()` under a
//!   [`ModelFromBodyLayer`](crate::route::ModelFromBodyLayer), when the
//!   layer came from `ServiceBuilderModelExt::hedge`).
//!
//! # Requests the hedge can copy
//!
//! A backup is a copy of the request ([`CloneRequest`]): an
//! `http::Request<B>` with a `Clone` body. Over HTTP,
//! `route::ModelFromBodyLayer` (feature `body`) reads the body into a
//! `Full<Bytes>` while it finds the model. A body that is not `Clone` —
//! tonic's `tonic::body::Body` (a gRPC unary call), hyper's `Incoming` —
//! is read whole, under a limit, by [`BufferRequestBodyLayer`] above the
//! hedge; below the hedge, `ServiceBuilder::map_request` turns the
//! `Full<Bytes>` back into the body the service takes (for tonic's
//! `Channel`, `req.map(tonic::body::Body::new)`). A request that cannot be
//! copied (its `clone_request` returns `None`) is sent once, unhedged.
//!
//! # Backpressure and cost
//!
//! The layer adds no backpressure: `poll_ready` is the inner service's. A
//! `call` not preceded by a ready `poll_ready` fails with
//! [`NotReady`](crate::error::NotReady), sending nothing and drawing on
//! no budget (the crate's [readiness contract](crate#readiness)).
//! It reserves nothing for the backup: the backup's clone of the inner
//! service is polled ready only once the delay has passed and the gate and
//! budget allow it. A request that does not hedge costs the request's
//! clone, one shared slot in its extensions, a few atomic operations and
//! no lock; the timer is armed only if the first attempt is not ready at
//! its first poll. The layer must run inside a Tokio runtime with time
//! enabled (as `tokio::time` requires).

mod budget;
mod buffer;
mod config;
mod delay;
mod first_frame;
pub mod future;
mod gate;
mod layer;
mod refusal;
mod request;
mod retry;
mod service;
mod shared;
mod verdict;

pub use self::budget::Budget;
pub use self::buffer::{BufferRequestBody, BufferRequestBodyFuture, BufferRequestBodyLayer};
pub use self::config::{HedgeConfig, HedgeConfigBuilder};
pub use self::first_frame::{FirstFrame, FirstFrameFuture, FirstFrameLayer, Replay};
#[cfg(feature = "balance")]
pub use self::gate::BalancerLoad;
pub use self::gate::LoadGate;
pub use self::layer::HedgeLayer;
pub use self::request::CloneRequest;
pub use self::retry::RetryPolicy;
pub use self::service::Hedge;
pub use self::shared::{HedgeHandle, HedgeStats};
