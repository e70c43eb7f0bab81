//! Typed errors returned by the middleware in this crate.
//!
//! Every error is a small concrete type that the middleware boxes into a
//! [`BoxError`]; callers check for one with `err.is::<T>()` or
//! `err.downcast_ref::<T>()`, as with tower's own `Elapsed` or `Overloaded`:
//!
//! ```
//! use tower_model_balance::error::{BoxError, PayloadTooLarge};
//!
//! let err: BoxError = PayloadTooLarge::new(1024).into();
//! assert!(err.is::<PayloadTooLarge>());
//! ```
//!
//! This module gathers them in one place. Each error that names a value of
//! a module — a model, a backend, an urgency — is defined beside that
//! module (the route's, the balancer's, placement's) and re-exported here;
//! those the balancer and placement return exist with feature `balance`.
//! The errors that name none are defined under this module
//! (`error/common.rs`, `error/stream.rs`) and import nothing of the crate.

pub(crate) mod common;
pub(crate) mod stream;

pub use self::common::{BreakerOpen, InvalidConfig, NoRuntime, NotReady, PayloadTooLarge};
pub use self::stream::{StreamFailed, StreamFailure};
pub use crate::route::error::{InvalidReason, InvalidRoute};
/// The boxed error type used by services in this crate: tower's own.
#[doc(no_inline)]
pub use tower::BoxError;

#[cfg(feature = "balance")]
#[cfg_attr(docsrs, doc(cfg(feature = "balance")))]
pub use crate::balance::error::{DuplicateBackend, NoAlternative, NoHealthyBackend, Overloaded};
#[cfg(feature = "balance")]
#[cfg_attr(docsrs, doc(cfg(feature = "balance")))]
pub use crate::placement::error::{ModelLoadFailed, UnknownModel};
