//! On-demand model placement: load a model where affinity places it,
//! through the model server's own repository API.
//!
//! ```
//! use std::time::Duration;
//! use tower_model_balance::placement::{PlacementConfig, WhenCold};
//!
//! let policy = PlacementConfig::builder()
//!     .load_timeout(Duration::from_secs(300))
//!     .when_cold(WhenCold::PreferWarm)
//!     .build()
//!     .unwrap();
//! assert!(format!("{policy:?}").contains("load_timeout: 300s"));
//! assert!(PlacementConfig::builder().load_timeout(Duration::ZERO).build().is_err());
//! ```
//!
//! Many model servers do not load a model when a request names it: Triton
//! in explicit model-control mode, KServe v2 servers such as MLServer, and
//! vLLM for LoRA adapters answer 404 until someone calls their repository
//! API. ModelMesh and AIBrix do that from a central controller; here the
//! balancer does it where the routing decision is made. Enable it on a
//! balancer with
//! [`BalancerHandle::enable_placement`](crate::balance::BalancerHandle::enable_placement)
//! and a [`ModelLoader`]; every backend needs an address
//! ([`BackendMeta::with_address`](crate::backend::BackendMeta::with_address)).
//!
//! When an inference request is routed to a backend where its model is
//! not known to be served:
//!
//! 1. **Allow-list.** Only models the backend's repository knows
//!    ([`ModelLoader::repository`], refreshed every
//!    [`repository_interval`](PlacementConfigBuilder::repository_interval))
//!    are loaded; any other fails at once with
//!    [`UnknownModel`](crate::error::UnknownModel) and triggers no load.
//!    Placement assumes the backends share one model repository (as a
//!    Triton fleet over one object store does): a model the picked backend's
//!    repository lacks fails there, even if another backend's holds it.
//!    A backend whose repository was never read (just added, or its index
//!    call failing) loads nothing: a request for it waits for the first
//!    read, within `load_timeout`, then is refused or loads as above — or
//!    fails at once with [`ModelLoadFailed`](crate::error::ModelLoadFailed)
//!    once a read has failed (a backend down since it joined), unsent, so
//!    that [`RetryPolicy`](crate::hedge::RetryPolicy) sends it to another
//!    backend; it starts no task and takes no place among the running
//!    loads.
//! 2. **One load per (backend, model), and bounds.** The first request starts the load;
//!    every request that arrives while it runs waits for the same load (no
//!    thundering herd of load calls). A backend loads one model at a time:
//!    a load waits for the one before it, and the wait counts against its
//!    `load_timeout` (a load that hangs makes the loads queued behind it on
//!    that backend time out too). With [`WhenCold::PreferWarm`] a
//!    request goes instead to a backend past the owners where the model is
//!    served, if one admits, and the owner's load still starts.
//!    At most 8 loads run or wait on one backend (running loads are so at
//!    most 8 × the backends): a request that needs a load past it fails at
//!    once with [`ModelLoadFailed`](crate::error::ModelLoadFailed) saying
//!    so. A model starts at most one load per 2 s on one backend (a model
//!    loaded, evicted and reloaded in a loop is thrashing): a request that
//!    needs it loaded sooner waits for the gap (within `load_timeout`).
//!    [`PlacementStats::loads_limited`](crate::balance::PlacementStats::loads_limited)
//!    counts both.
//! 3. **Room first.** When the backend already holds as many models as its
//!    [`model_slots`](crate::backend::BackendMeta::with_model_slots), or its
//!    probes (of the last 30 s) report 90% of its GPU memory used — of the
//!    budget [`BackendMeta::with_gpu_memory`](crate::backend::BackendMeta::with_gpu_memory)
//!    gave, else of the total it reports — its
//!    least recently routed model that it does not own under the current
//!    ring and that has no request in flight there is unloaded first.
//! 4. **Failure.** A load that fails or outlives
//!    [`load_timeout`](PlacementConfigBuilder::load_timeout) fails every
//!    waiting request with [`ModelLoadFailed`](crate::error::ModelLoadFailed),
//!    and for 5 s the requests for that model on that backend fail at once
//!    with it, without another load call. A load the backend could not be
//!    reached for, or that timed out, counts as one failure for its
//!    breaker (however many requests waited), never as a slow call; a
//!    load the backend answered with an error (the model is broken, its
//!    files missing) is the model's failure and counts nothing against the
//!    backend — one model that cannot load must not open every breaker it
//!    is tried on.
//!    A wait ends sooner when its backend leaves: once health ejects it
//!    (a backend that hangs, its probes unanswered) or discovery removes
//!    it, every request waiting there for a load (or for its first
//!    repository read) fails at once with
//!    [`ModelLoadFailed`](crate::error::ModelLoadFailed), unsent, so that
//!    [`RetryPolicy`](crate::hedge::RetryPolicy) sends it elsewhere, and
//!    the load running there ends — counted nothing more against the
//!    backend, and not remembered: once readmitted, the model loads there
//!    again. A backend ejected already when the request was picked for
//!    it (panic mode) or kept in by the ejection cap holds its waits to
//!    the load timeout.
//!    A 404 from a backend believed to serve the model, whose body says
//!    the model is absent, marks it not resident there and starts one
//!    reload; the request that got the 404 gets it (its body may not be
//!    cloneable, so it is not sent again), and the requests after it wait
//!    for the reload. A 404 for a version or a route that does not exist,
//!    or one dropped unread, changes nothing (what servers answer for
//!    each: `balance/completion/not_found.rs`).
//!
//! A request that waited for a load carries [`WaitedForLoad`] in its
//! response extensions: it was a cold start, however fast the server
//! answered afterwards.
//!
//! Loaders for real servers (feature `probe`): [`KServeV2Loader`] (Triton,
//! KServe v2: `POST /v2/repository/models/{name}/load`) and
//! [`VllmLoraLoader`] (`POST /v1/load_lora_adapter`).

mod config;
pub(crate) mod error;
#[cfg(feature = "probe")]
mod kserve;
mod loader;
#[cfg(feature = "probe")]
mod lora;

pub use self::config::{PlacementConfig, PlacementConfigBuilder, WhenCold};
#[cfg(feature = "probe")]
#[cfg_attr(docsrs, doc(cfg(feature = "probe")))]
pub use self::kserve::KServeV2Loader;
pub use self::loader::{LoadError, ModelLoader, Repository};
#[cfg(feature = "probe")]
#[cfg_attr(docsrs, doc(cfg(feature = "probe")))]
pub use self::lora::VllmLoraLoader;

/// Marks a response whose request waited for its model to be loaded (in
/// the response's extensions): a cold start in every figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct WaitedForLoad;
