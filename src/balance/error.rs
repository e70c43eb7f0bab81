//! The balancer's refusals: no backend for the model, every backend at its
//! admission limit, a hedge's backup with nowhere better to go, a first
//! backend set that names a backend twice. Each names the model (and the
//! backend or urgency) it was for, or the backend.

use std::fmt;
use std::time::Duration;

use crate::backend::id::BackendId;
use crate::route::{ModelId, Urgency};

/// No backend could take the request: none is known, or every candidate is
/// ejected (breaker open) while panic mode does not apply (the balancer's
/// `panic_threshold` is 0, or enough backends are eligible elsewhere).
/// Returned at once by the balancer, never after a wait.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NoHealthyBackend {
    /// The model the request was for.
    pub model: ModelId,
}

impl NoHealthyBackend {
    /// Creates the error for `model`.
    pub(crate) fn new(model: ModelId) -> Self {
        Self { model }
    }

    /// `NoHealthyBackend::new` for the tests of a crate that maps the error (feature
    /// `testing`): not part of the public API.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn for_tests(model: ModelId) -> Self {
        Self::new(model)
    }
}

impl fmt::Display for NoHealthyBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no healthy backend for model `{}`", self.model)
    }
}

impl std::error::Error for NoHealthyBackend {}

/// Every backend the request could go to is at its admission limit (see
/// [`AdmissionConfig`](crate::balance::AdmissionConfig)): the request was
/// shed, never sent. Returned by the balancer at once (within the `call`),
/// or after the request waited for room as long as its urgency allows, or
/// when a request of a higher urgency took its place in a full queue. A
/// gateway answers it `429 Too Many Requests` (or 503) with a
/// `Retry-After` of [`retry_after`](Self::retry_after), rounded up to whole
/// seconds.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Overloaded {
    /// The model the request was for.
    pub model: ModelId,
    /// The request's urgency.
    pub urgency: Urgency,
    /// How long it waited for room before it was shed (zero: shed at once).
    pub waited: Duration,
    /// When to try again: the configuration's hint.
    pub retry_after: Duration,
}

impl Overloaded {
    /// Creates the error.
    pub(crate) fn new(
        model: ModelId,
        urgency: Urgency,
        waited: Duration,
        retry_after: Duration,
    ) -> Self {
        Self {
            model,
            urgency,
            waited,
            retry_after,
        }
    }

    /// `Overloaded::new` for the tests of a crate that maps the error (feature
    /// `testing`): not part of the public API.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn for_tests(
        model: ModelId,
        urgency: Urgency,
        waited: Duration,
        retry_after: Duration,
    ) -> Self {
        Self::new(model, urgency, waited, retry_after)
    }
}

impl fmt::Display for Overloaded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "overloaded: every backend for model `{}` is at its admission limit ({:?} request shed after {} ms); retry after {} ms",
            self.model,
            self.urgency,
            self.waited.as_millis(),
            self.retry_after.as_millis()
        )
    }
}

impl std::error::Error for Overloaded {}

/// A hedge's backup ([`Exclude::new`](crate::backend::Exclude::new)) that
/// has nowhere better to go: no eligible backend but the excluded one has
/// the model resident, so the backup would land on the backend the first
/// attempt went to, or pay a cold load elsewhere. The balancer refuses it
/// at once, before picking (nothing is counted on any backend); the
/// hedging layer counts it as
/// [`suppressed_by_no_alternative`](crate::hedge::HedgeStats::suppressed_by_no_alternative)
/// and lets the first attempt go on alone.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NoAlternative {
    /// The model the backup was for.
    pub model: ModelId,
    /// The backend its first attempt went to.
    pub excluded: BackendId,
}

impl NoAlternative {
    /// Creates the error.
    pub(crate) fn new(model: ModelId, excluded: BackendId) -> Self {
        Self { model, excluded }
    }
}

impl fmt::Display for NoAlternative {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no eligible backend but `{}` has model `{}` resident: the backup is not sent",
            self.excluded, self.model
        )
    }
}

impl std::error::Error for NoAlternative {}

/// The first backend set a balancer was built over names one backend ID
/// under two discovery keys — one backend given twice, as when a
/// `ServiceList` (keyed by position) holds two `Backend`s with one
/// [`BackendId`]. The balancer routes by ID, so it would keep the first and
/// drop the second: a configuration mistake that halves a fleet of two.
/// Returned (boxed) by [`ModelBalancer::new`](crate::balance::ModelBalancer::new)
/// and [`from_rng`](crate::balance::ModelBalancer::from_rng); nothing is
/// started. An insert of a live key is not this error: it replaces that
/// backend, as `tower::discover::Change::Insert` means.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DuplicateBackend {
    /// The ID given twice (the first one found, in discovery order).
    pub id: BackendId,
}

impl DuplicateBackend {
    /// Creates the error.
    pub(crate) fn new(id: BackendId) -> Self {
        Self { id }
    }
}

impl fmt::Display for DuplicateBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "backend `{}` given more than once in the balancer's first backend set (under two discovery keys or more)",
            self.id
        )
    }
}

impl std::error::Error for DuplicateBackend {}
