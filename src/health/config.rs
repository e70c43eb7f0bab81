//! [`HealthConfig`]: score weights, smoothing, thresholds and ejection
//! limits, validated.

mod builder;
mod fields;
#[cfg(test)]
mod tests;

pub use self::builder::HealthConfigBuilder;
pub use self::fields::HealthConfig;
