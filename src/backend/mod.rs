//! Backends: their identity, what discovery yields for each, and the
//! request extensions that name one.
//!
//! ```
//! use tower_model_balance::backend::{Backend, BackendId, BackendMeta};
//!
//! let id = BackendId::new("gpu-node-07:8000").unwrap();
//! assert_eq!(id.as_str(), "gpu-node-07:8000");
//! assert!(BackendId::new("").is_err());
//! assert!(BackendId::new("gpu node 7").is_err());
//!
//! let meta = BackendMeta::new(id).with_weight(2).unwrap();
//! let backend = Backend::with_meta(meta, "an endpoint");
//! assert_eq!(backend.meta.weight(), 2);
//! ```
//!
//! * [`BackendId`] (`backend/id.rs`) — the bytes the ring hashes;
//! * [`BackendMeta`] and [`Backend`] (`backend/meta.rs`) — what a
//!   discovery source yields: metadata (weight, model slots, resident
//!   models, addresses) and the endpoint; the balancer takes them from
//!   any `tower::discover::Discover`;
//! * [`PickedSlot`] and [`Exclude`] (`backend/extensions.rs`) — request
//!   extensions through which a hedge or a retry and the balancer pass a
//!   backend.
//!
//! The files import one another by the file that defines an item.
//! `backend` sits above `route`: `meta.rs` reads `route`'s `ModelId` and
//! `extensions.rs` its `Route`, and `route` imports nothing of `backend`
//! (a request's `Exclude` is read from its extensions by the balancer).

pub(crate) mod extensions;
pub(crate) mod id;
mod meta;

pub use self::extensions::{Exclude, PickedSlot};
pub use self::id::BackendId;
pub use self::meta::{Backend, BackendMeta};
