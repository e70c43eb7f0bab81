//! The balancer's configuration: [`BalanceConfig`], validated by its
//! [`BalanceConfigBuilder`].

pub(crate) mod admission;
mod builder;
pub(crate) mod fields;

pub use self::admission::{AdmissionConfig, AdmissionConfigBuilder, Limit};
pub use self::builder::BalanceConfigBuilder;
pub(crate) use self::fields::BreakerHook;
#[cfg(test)]
pub(crate) use self::fields::DEFAULT_LATENCY_DECAY;
pub use self::fields::{BalanceConfig, BreakerScope, ResidencyHeader, StagingConfig};
