//! Discovery sources: where the balancer learns which backends exist.
//!
//! ```
//! use std::convert::Infallible;
//!
//! use tokio::sync::watch;
//! use tower::service_fn;
//! use tower_model_balance::backend::{Backend, BackendId};
//! use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
//! use tower_model_balance::discover::Watch;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), tower::BoxError> {
//! let endpoint = service_fn(|_req: http::Request<String>| async {
//!     Ok::<_, Infallible>(http::Response::new(String::new()))
//! });
//! let backend = |name: &str| Backend::new(BackendId::new(name).unwrap(), endpoint.clone());
//!
//! // Your registry publishes the whole fleet; the balancer sees the changes.
//! let (fleet, sets) = watch::channel(vec![backend("gpu-0"), backend("gpu-1")]);
//! let balancer = ModelBalancer::new(Watch::new(sets), BalanceConfig::default())?;
//! let handle = balancer.handle();
//! let names = || {
//!     let mut names: Vec<_> = handle.backends().iter().map(|b| b.id.to_string()).collect();
//!     names.sort();
//!     names
//! };
//! assert_eq!(names(), ["gpu-0", "gpu-1"]);
//!
//! // gpu-0 leaves, gpu-2 joins: a `Remove` and an `Insert`, applied by the
//! // balancer's discovery task.
//! fleet.send_modify(|set| {
//!     set.remove(0);
//!     set.push(backend("gpu-2"));
//! });
//! for _ in 0..100 {
//!     if names() == ["gpu-1", "gpu-2"] {
//!         break;
//!     }
//!     tokio::task::yield_now().await;
//! }
//! assert_eq!(names(), ["gpu-1", "gpu-2"]);
//! # Ok(()) }
//! ```
//!
//! A discovery source is any [`tower::discover::Discover`] whose services
//! are [`Backend`](crate::backend::Backend)s: a backend's
//! [`BackendMeta`](crate::backend::BackendMeta) (ID, weight, model slots,
//! resident models, address, GPU memory) paired with its endpoint. The
//! sources here key every change by the backend's ID, and never fail
//! (`Error = Infallible`):
//!
//! * [`Static`] — a fixed list: one `Insert` per backend, then quiet for
//!   ever;
//! * [`Watch`] — whole backend sets published on a
//!   [`tokio::sync::watch`] channel by a registry of your own, turned into
//!   `Remove`s and `Insert`s (new backends and changed metadata);
//! * `Dns` (feature `dns`) — a hostname re-resolved on an interval, each
//!   address a backend `ip:port`; a failed resolution keeps the fleet.
//! * `etcd::Etcd` (feature `etcd`) — a key prefix in etcd watched from a
//!   consistent snapshot, each key a backend and its value the backend's
//!   record; with `etcd::Registration`, the backends' side (a record under
//!   a lease kept alive).
//!
//! How the balancer applies a change: an `Insert` for a new ID adds the
//! backend (its ring points staged in, see
//! [`StagingConfig`](crate::balance::StagingConfig)); an `Insert` for a live ID updates
//! its metadata and endpoint and keeps its breaker, health and in-flight
//! count; a `Remove` makes it ineligible at once, and requests in flight
//! there finish normally. An `Insert` of an ID live under another key (a
//! source of your own, or tower's `ServiceList`, keyed by position) is
//! refused by `ModelBalancer::new` in the first backend set
//! ([`DuplicateBackend`](crate::error::DuplicateBackend)), and ignored,
//! logged and counted later on.
//!
//! The sources sit below the balancer: feature `discover` does not turn on
//! `balance`, and what they yield ([`crate::backend`]) is always built.
//!
//! Sets are compared by metadata: endpoints are not comparable, so a new
//! endpoint with unchanged metadata is not announced (see [`Watch`]).

mod counters;
mod diff;
mod static_list;
mod watch;

#[cfg(feature = "dns")]
mod dns;
#[cfg(feature = "etcd")]
#[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
pub mod etcd;

pub use self::counters::{DiscoverHandle, DiscoverStats};
#[cfg(feature = "dns")]
#[cfg_attr(docsrs, doc(cfg(feature = "dns")))]
pub use self::dns::{Dns, DnsBuilder, HickoryResolver, Resolve, SystemConfError};
pub use self::static_list::Static;
pub use self::watch::Watch;
