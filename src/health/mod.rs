//! Health of backends: smoothed scores from request outcomes and active
//! probes of model-server APIs.

mod signals;

#[cfg(feature = "probe")]
#[cfg_attr(docsrs, doc(cfg(feature = "probe")))]
pub mod probe;

pub use self::signals::LoadSignals;
