//! Model-aware load balancing, circuit breaking and hedging for ML inference
//! fleets, as [Tower] middleware.
//!
//! Routing inference like ordinary web traffic fails: a request sent to a
//! backend that does not hold its model in GPU memory pays a cold load, 10×
//! to 100× slower than an inference. This crate routes by model:
//!
//! * [`route`] reads each request's [`RouteInfo`](route::RouteInfo) (model
//!   ID, inference or update, urgency, size) from its extensions or headers,
//!   or (feature `body`) from an OpenAI-style JSON body or a KServe v2 path;
//! * [`ring`] pins every model to a stable few backends by consistent
//!   hashing (xxh3, virtual nodes, weights);
//! * [`balance`] (feature `balance`) sends inference to the model's owners
//!   — as many as its demand needs, those holding it resident first — under
//!   a bounded-load cap, and updates by power of two choices on cost, with a
//!   circuit breaker per backend and staged ring changes;
//! * [`classify`] (with `breaker`, `hedge` or `balance`) decides what a
//!   call's result means for its backend — a success, a failure, an
//!   overload or the caller's own error — for all three;
//! * [`breaker`] (feature `breaker`) is that circuit breaker, usable alone as
//!   a `Layer` in front of any `Service`;
//! * [`hedge`] (feature `hedge`) sends a backup request to another backend
//!   when the first is slower than the model's p95, within a 5% budget
//!   shared with retries and never while the fleet is overloaded;
//! * [`health`] (feature `health`) scores each backend from its outcomes
//!   and from probes of model-server APIs (KServe v2 / Triton,
//!   OpenAI-compatible, Prometheus metrics; feature `probe`), ejects the
//!   failing and the latency outliers with hysteresis, and warms up
//!   joining backends;
//! * [`discover`] (feature `discover`) tells the balancer which backends
//!   exist: a static list, whole sets from a `tokio::sync::watch` channel,
//!   or (feature `dns`) a hostname re-resolved on an interval;
//! * [`placement`] (with `balance`) loads a model where affinity places it,
//!   through the server's own repository API, for servers in explicit
//!   model-control mode (Triton, KServe v2, vLLM LoRA adapters);
//! * [`config`] (feature `config`) reads the whole stack's settings from one
//!   TOML file; [`metrics`](mod@metrics) (feature `metrics`) exports the
//!   balancer's figures through the `metrics` facade;
//! * [`endpoint`] turns one HTTP client into an endpoint per backend
//!   (feature `reqwest`: a `reqwest::Client` too);
//! * [`ServiceBuilderModelExt`] adds each layer as a method of tower's
//!   `ServiceBuilder` (`.model_from_body()`, `.circuit_breaker(policy)`,
//!   `.hedge(policy, gate)`);
//! * the companion crate `tower-model-balance-sim` runs simulated model
//!   servers on loopback, to test and try a stack before production.
//!
//! # Quick start
//!
//! ```
//! use tower::{discover::ServiceList, service_fn, ServiceExt};
//! use tower_model_balance::backend::{Backend, BackendId};
//! use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), tower::BoxError> {
//! // One endpoint per backend; in production a hyper-util client behind
//! // `endpoint::SetOrigin` and a timeout (see the README).
//! let backends = ["gpu-0", "gpu-1", "gpu-2"].map(|name| {
//!     let endpoint = service_fn(move |_req: http::Request<String>| async move {
//!         Ok::<_, std::io::Error>(http::Response::new(name.to_string()))
//!     });
//!     Backend::new(BackendId::new(name).unwrap(), endpoint)
//! });
//! let balancer = ModelBalancer::new(ServiceList::new(backends), BalanceConfig::default())?;
//!
//! let request = http::Request::post("/v2/models/llama-3-8b/infer")
//!     .header("x-model-id", "llama-3-8b")
//!     .body(String::new())?;
//! let response = balancer.clone().oneshot(request).await?;
//! println!("served by {}", response.into_body().into_inner());
//!
//! // Bad input is a typed error, never a panic.
//! let no_model = http::Request::post("/").body(String::new())?;
//! assert!(balancer.oneshot(no_model).await.is_err());
//! # Ok(()) }
//! ```
//!
//! # Readiness
//!
//! Every `Service` of this crate takes tower's contract: `call` only after
//! a `poll_ready` on the same value returned `Ready(Ok(()))`, one `call`
//! for each such `poll_ready`. `ServiceExt::ready`, `oneshot`, `call_all`
//! and the servers (hyper, axum, tonic) keep it; code that calls `call`
//! by hand must too. A caller that breaks it gets, from every layer, the
//! same answer — never a panic (tower's `ConcurrencyLimit`, `RateLimit`
//! and `Buffer` panic), never a request sent to a service that may not be
//! ready, never a silently dropped one — as long as the service the call
//! reaches first, through the pass-throughs, is one of the crate's:
//!
//! * **The layers with state of their own** — the circuit breaker
//!   (`breaker::CircuitBreaker`), the balancer (`balance::ModelBalancer`)
//!   and the hedge (`hedge::Hedge`) — answer a `call` made without a
//!   preceding ready `poll_ready` with a response future that resolves at
//!   once to [`error::NotReady`]. The inner service or endpoint is not
//!   called, and nothing is taken or counted: no breaker permit or
//!   reservation, no in-flight request, no hedge budget, nothing in the
//!   breaker's, balancer's or hedge's stats.
//! * **Readiness is consumed by `call`**, whatever the call's outcome: the
//!   next `call` needs a new `poll_ready` (as tower's `LoadShed`).
//!   Between them a ready service stays ready.
//! * **Readiness is not cloned**: a clone starts not ready, however ready
//!   the value it was cloned from.
//! * **The pass-throughs** — `route::ModelFromBody`,
//!   `hedge::BufferRequestBody`, `hedge::FirstFrame`,
//!   `endpoint::SetOrigin` and `backend::Backend` — keep no readiness,
//!   permit or count of their own: as tower's `MapRequest`, `Timeout` and
//!   `Retry` do, their `poll_ready` is the inner service's and `call`
//!   forwards (`ModelFromBody` and `BufferRequestBody` once the body is
//!   read, to the very value `poll_ready` drove ready). The inner
//!   service's contract applies: over any layer of the list above,
//!   `NotReady`; over a service of another crate, that service's own
//!   answer (tower's `Buffer` panics, hyper-util's client serves).
//!
//! The balancer is always ready (it sheds in `call`), so its `poll_ready`
//! costs a flag; the pick API (`ModelBalancer::pick`) is no `Service` and
//! takes no readiness. The endpoint `endpoint::ReqwestEndpoint` (feature
//! `reqwest`) is `reqwest::Client`'s readiness: always ready, it serves a
//! call made without `poll_ready`, as reqwest's own client does.
//!
//! [Tower]: https://docs.rs/tower
#![deny(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod backend;
pub mod builder;
pub mod endpoint;
pub mod error;
pub mod ring;
pub mod route;

#[cfg(any(feature = "body", feature = "hedge"))]
mod buffer;
#[cfg(any(feature = "health", feature = "hedge"))]
mod histogram;

#[cfg(feature = "breaker")]
mod sync;

#[cfg(any(feature = "breaker", feature = "hedge", feature = "balance"))]
#[cfg_attr(
    docsrs,
    doc(cfg(any(feature = "breaker", feature = "hedge", feature = "balance")))
)]
pub mod classify;

#[cfg(feature = "breaker")]
#[cfg_attr(docsrs, doc(cfg(feature = "breaker")))]
pub mod breaker;

#[cfg(feature = "balance")]
#[cfg_attr(docsrs, doc(cfg(feature = "balance")))]
pub mod balance;

#[cfg(feature = "health")]
#[cfg_attr(docsrs, doc(cfg(feature = "health")))]
pub mod health;

#[cfg(feature = "balance")]
#[cfg_attr(docsrs, doc(cfg(feature = "balance")))]
pub mod placement;

#[cfg(feature = "config")]
#[cfg_attr(docsrs, doc(cfg(feature = "config")))]
pub mod config;

#[cfg(feature = "kv-events")]
#[cfg_attr(docsrs, doc(cfg(feature = "kv-events")))]
pub mod kv;

#[cfg(feature = "hedge")]
#[cfg_attr(docsrs, doc(cfg(feature = "hedge")))]
pub mod hedge;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;

#[cfg(feature = "discover")]
#[cfg_attr(docsrs, doc(cfg(feature = "discover")))]
pub mod discover;

#[cfg(any(feature = "balance", feature = "etcd"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "balance", feature = "etcd"))))]
pub mod task;

pub use builder::ServiceBuilderModelExt;

/// The README's examples, compiled as doc tests.
#[cfg(all(doctest, feature = "balance"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The gateway guide's examples (`docs/gateway.md`), compiled as doc tests.
#[cfg(all(doctest, feature = "balance"))]
#[doc = include_str!("../docs/gateway.md")]
pub struct GatewayDoctests;

// The Rust examples of the pages under `docs/`, compiled as doc tests too.

/// `docs/balancer.md`'s examples, compiled as doc tests.
#[cfg(all(doctest, feature = "full"))]
#[doc = include_str!("../docs/balancer.md")]
pub struct BalancerDocDoctests;

/// `docs/breaker.md`'s examples, compiled as doc tests.
#[cfg(all(doctest, feature = "balance"))]
#[doc = include_str!("../docs/breaker.md")]
pub struct BreakerDocDoctests;

/// `docs/hedging.md`'s examples, compiled as doc tests.
#[cfg(all(doctest, feature = "balance"))]
#[doc = include_str!("../docs/hedging.md")]
pub struct HedgingDocDoctests;

/// `docs/health-and-discovery.md`'s examples, compiled as doc tests.
#[cfg(all(doctest, feature = "balance"))]
#[doc = include_str!("../docs/health-and-discovery.md")]
pub struct HealthDocDoctests;

/// `docs/compile-errors.md`'s examples, compiled as doc tests: each must
/// fail to compile with the error code it names.
#[cfg(all(doctest, feature = "full"))]
#[doc = include_str!("../docs/compile-errors.md")]
pub struct CompileErrorsDoctests;

/// `docs/tonic.md`'s examples, compiled as doc tests.
#[cfg(all(doctest, feature = "balance"))]
#[doc = include_str!("../docs/tonic.md")]
pub struct TonicDocDoctests;
