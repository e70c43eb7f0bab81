//! Model-aware load balancing for ML inference fleets, as Tower layers.
#![deny(missing_docs, missing_debug_implementations, unreachable_pub, rust_2018_idioms)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod backend;
pub mod endpoint;
pub mod error;
pub mod ring;
pub mod route;

#[cfg(feature = "breaker")]
#[cfg_attr(docsrs, doc(cfg(feature = "breaker")))]
pub mod breaker;

#[cfg(feature = "balance")]
#[cfg_attr(docsrs, doc(cfg(feature = "balance")))]
pub mod balance;

#[cfg(feature = "sim")]
#[cfg_attr(docsrs, doc(cfg(feature = "sim")))]
pub mod sim;
