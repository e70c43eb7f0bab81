//! Health of backends: smoothed scores from request outcomes and active
//! probes of model-server APIs, with hysteresis and outlier ejection.

mod histogram;
mod policy;
mod score;
mod signals;

pub mod probe;

pub(crate) use self::histogram::LatencyHistogram;
pub use self::policy::{HealthPolicy, HealthPolicyBuilder};
pub(crate) use self::score::{evaluate, HealthState, Observation};
pub use self::score::{Ejection, HealthStatus};
pub use self::signals::LoadSignals;
