//! The balancer's refusals as the hedge reads them. Without feature
//! `balance` there is no balancer, and none is ever seen.

use crate::error::BoxError;

#[cfg(feature = "balance")]
use crate::balance::error::{NoAlternative, NoHealthyBackend, Overloaded};
#[cfg(feature = "balance")]
use crate::placement::error::UnknownModel;

/// Whether `error` is the balancer's `Overloaded`: its admission shed the
/// call.
#[cfg(feature = "balance")]
pub(super) fn shed(error: &BoxError) -> bool {
    error.is::<Overloaded>()
}

/// Whether `error` is a refusal of the balancer's that every backend
/// would give alike: no backend, a model no repository knows, a backup
/// with nowhere to go, every backend at its admission limit.
#[cfg(feature = "balance")]
pub(super) fn refused(error: &BoxError) -> bool {
    error.is::<NoHealthyBackend>()
        || error.is::<UnknownModel>()
        || error.is::<NoAlternative>()
        || error.is::<Overloaded>()
}

/// Whether `error` is the balancer's `NoAlternative`: a backup refused
/// before any pick.
#[cfg(feature = "balance")]
pub(super) fn no_alternative(error: &BoxError) -> bool {
    error.is::<NoAlternative>()
}

#[cfg(not(feature = "balance"))]
pub(super) fn shed(_: &BoxError) -> bool {
    false
}

#[cfg(not(feature = "balance"))]
pub(super) fn refused(_: &BoxError) -> bool {
    false
}

#[cfg(not(feature = "balance"))]
pub(super) fn no_alternative(_: &BoxError) -> bool {
    false
}
