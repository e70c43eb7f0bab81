//! The balancer's configuration: [`BalanceConfig`](fields::BalanceConfig), validated by its
//! [`BalanceConfigBuilder`](builder::BalanceConfigBuilder).

pub(crate) mod admission;
pub(crate) mod builder;
pub(crate) mod fields;
