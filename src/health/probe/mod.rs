//! Active probes of the APIs real model servers expose.
//!
//! ```
//! use tower_model_balance::backend::BackendId;
//! use tower_model_balance::endpoint::Origin;
//! use tower_model_balance::health::probe::{
//!     KServeV2, MetricNames, ProbeClient, Prober, ProbeTarget, PrometheusMetrics,
//! };
//! use tower_model_balance_sim::{ModelServer, ServerConfig};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let server = ModelServer::start("gpu-0", ServerConfig::default()).await.unwrap();
//! let target = ProbeTarget::new(BackendId::new("gpu-0").unwrap(), Origin::http(server.addr()));
//!
//! // Triton-like: readiness and models from KServe v2, GPU memory from metrics.
//! // One client, its connection pool shared by both.
//! let client = ProbeClient::new();
//! let prober = (KServeV2::new(client.clone()), PrometheusMetrics::new(client, MetricNames::triton()));
//! let probe = prober.probe(&target);
//! // In production, bound it: tokio::time::timeout(Duration::from_secs(2), probe).
//! let report = probe.await.unwrap();
//! assert_eq!(report.ready, Some(true));
//! assert_eq!(report.resident_models, Some(vec![]), "nothing loaded yet");
//! assert_eq!(report.load.gpu_memory_used_bytes, Some(0.0));
//! assert!(report.load.gpu_memory_total_bytes.unwrap() > 0.0);
//! # }
//! ```
//!
//! A [`Prober`] asks one backend, at its [`Origin`](crate::endpoint::Origin), whether it is ready,
//! which models it holds and how loaded it is, and answers a
//! [`ProbeReport`]. A pair of probers is a prober too: both are asked and
//! their reports merged. A balancer runs one over its backends with
//! [`BalancerHandle::spawn_probes`](crate::balance::BalancerHandle::spawn_probes)
//! ([`ProbeConfig`]: interval, timeout, jitter, concurrency).
//!
//! The trait, the report and the config are always here; the HTTP probers
//! of real model-server APIs need the `probe` feature:
//!
//! | prober | asks | learns |
//! | --- | --- | --- |
//! | [`KServeV2`] | `GET /v2/health/ready`, `POST /v2/repository/index` (Triton, KServe) | readiness, models `READY` |
//! | [`OpenAiModels`] | `GET /v1/models` (vLLM, SGLang, TGI) | readiness, served models |
//! | [`PrometheusMetrics`] | `GET /metrics`, names by [`MetricNames`] | KV-cache usage, queue, GPU memory |
//!
//! Probers apply no timeout — the caller does (a probe that hangs must
//! count as failed, and only the caller knows its interval) — and share
//! the [`ProbeClient`] they are built with (`default()` makes one each).
//! Each is `Clone` and cheap to clone. [`ProbeClient::new`] speaks plain
//! `http://`; for `https://` backends, give them
//! [`ProbeClient::from_client`] over the TLS client the traffic goes
//! through (its roots, its pool).
//!
//! Against a simulated server, which serves all three APIs:

mod config;
#[cfg(feature = "probe")]
pub(crate) mod fetch;
#[cfg(feature = "probe")]
pub(crate) mod kserve;
#[cfg(feature = "probe")]
mod metrics;
#[cfg(feature = "probe")]
pub(crate) mod openai;
mod prober;
pub(crate) mod warn;

#[cfg(feature = "probe")]
#[cfg_attr(docsrs, doc(cfg(feature = "probe")))]
pub use self::fetch::ProbeClient;
#[cfg(feature = "probe")]
#[cfg_attr(docsrs, doc(cfg(feature = "probe")))]
pub use self::kserve::KServeV2;
#[cfg(feature = "probe")]
#[cfg_attr(docsrs, doc(cfg(feature = "probe")))]
pub use self::metrics::{MetricNames, PrometheusMetrics};
#[cfg(feature = "probe")]
#[cfg_attr(docsrs, doc(cfg(feature = "probe")))]
pub use self::openai::OpenAiModels;

pub use self::config::{ProbeConfig, ProbeConfigBuilder};
pub use self::prober::{ProbeError, ProbeReport, ProbeTarget, Prober};
