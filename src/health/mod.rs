//! Health of backends: smoothed scores from request outcomes and active
//! probes of model-server APIs, with hysteresis and outlier ejection.
//!
//! ```
//! use std::time::Duration;
//!
//! use tower::{discover::ServiceList, service_fn};
//! use tower_model_balance::backend::{Backend, BackendId};
//! use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
//! use tower_model_balance::health::probe::ProbeReport;
//! use tower_model_balance::health::{Ejection, HealthConfig, LoadSignals};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
//! let policy = HealthConfig::builder().thresholds(0.2, 0.35).build().unwrap();
//! let config = BalanceConfig::builder().health(policy.clone()).build().unwrap();
//! let backends = ["gpu-0", "gpu-1", "gpu-2"].map(|name| {
//!     let endpoint = service_fn(|_req: http::Request<String>| async {
//!         Ok::<_, std::io::Error>(http::Response::new(String::new()))
//!     });
//!     Backend::new(BackendId::new(name).unwrap(), endpoint)
//! });
//! let balancer = ModelBalancer::new(ServiceList::new(backends), config).unwrap();
//! let handle = balancer.handle();
//! let gpu1 = BackendId::new("gpu-1").unwrap();
//! // The default evaluation interval (1 s), and a little more.
//! let next_evaluation = Duration::from_secs(1) + Duration::from_millis(1);
//!
//! // A probe (or your own telemetry) reports a deep queue: the capacity
//! // term, and so the score P2C divides the cost by, drops; not ejected.
//! let mut deep = ProbeReport::default();
//! deep.load.requests_waiting = Some(64.0);
//! handle.report_probe(&gpu1, Ok(&deep));
//! tokio::time::sleep(next_evaluation).await;
//! let health = handle.health(&gpu1).unwrap();
//! assert!(health.capacity < 0.15 && health.score < 0.75, "{health:?}");
//! assert_eq!(health.ejected, None);
//!
//! // It answers "not ready" again and again: ejected, not picked again
//! // until its score climbs back above 0.35.
//! let mut not_ready = ProbeReport::default();
//! not_ready.ready = Some(false);
//! for _ in 0..20 {
//!     handle.report_probe(&gpu1, Ok(&not_ready));
//! }
//! tokio::time::sleep(next_evaluation).await;
//! assert_eq!(handle.health(&gpu1).unwrap().ejected, Some(Ejection::Score));
//! # }
//! ```
//!
//! Each backend's **score** in [0, 1] is DESIGN.md's: `(1 − error_rate) ×
//! (0.5 × latency + 0.33 × capacity + 0.17 × connection)` (weights
//! configurable, see [`HealthConfig`]). The error rate is an EWMA over
//! outcomes — requests through the balancer and probes, a probe that fails
//! or answers not ready counting as a failure; the latency term is the
//! backend's own learned baseline p99 over its recent p99, a failure
//! counting at the failure penalty (1 s), so a backend failing in 1 ms
//! scores 0, not "fast"; the capacity term comes from what the server
//! reports ([`LoadSignals`]: KV-cache usage and queue depth for LLM
//! servers, free GPU memory for multi-model servers); the connection term
//! from the requests in flight. With no data the terms relax toward
//! neutral (half-life 10 s), so an old penalty is not kept for ever.
//!
//! The balancer evaluates every backend once an interval (1 s). Load
//! steers, it does not eject: the score is the weight P2C divides a
//! backend's cost by, but ejection judges it with the capacity and
//! connection terms at neutral (ejecting a busy backend would move its
//! load and its models' cold loads onto the others). A backend whose
//! ejection score falls below 0.2 is **ejected** and comes back only above
//! 0.35 (hysteresis: a score hovering around one threshold does not
//! toggle); one whose latency *per request in flight* runs over 3× its
//! peers' median (4× with one or two peers), 50 ms over it and 3× its own
//! baseline for 5 intervals in a row, while not failing — or that answers
//! nothing with requests in flight for over 1 s while a peer answers — is
//! ejected as a **latency outlier** for 30 s × its consecutive ejections
//! (a fleet slowed as a whole, a server busier under affinity or serving
//! longer prompts, or a queue behind a cold load, is not one).
//! At most 30% of the backends (at least one) are ejected at once, the
//! worst first. A backend joining a running fleet **warms up**: the weight
//! its cost is divided by rises from 0.1 to its score over 10 s, and its
//! latency estimate starts at the fleet's median — neither flooded nor
//! starved. Read a backend's figures with
//! [`BalancerHandle::health`](crate::balance::BalancerHandle::health).
//!
//! Scores come from two feeds: **passive**, every outcome through the
//! balancer (recorded without a lock), and **active**, the [`probe`]s of
//! the APIs real model servers expose, run by
//! [`BalancerHandle::spawn_probes`](crate::balance::BalancerHandle::spawn_probes)
//! or reported with
//! [`BalancerHandle::report_probe`](crate::balance::BalancerHandle::report_probe).

// The evaluation's machinery is driven by the balancer; alone, the
// feature offers the policy, the probe types and the probers.
#![cfg_attr(not(feature = "balance"), allow(dead_code, unused_imports))]

mod config;
mod score;
mod signals;

pub mod probe;

pub use self::config::{HealthConfig, HealthConfigBuilder};
pub(crate) use self::score::{evaluate, HealthState, Observation};
pub use self::score::{Ejection, HealthStatus};
pub use self::signals::LoadSignals;
pub(crate) use crate::histogram::LatencyHistogram;
