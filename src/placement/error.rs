//! Placement's errors: a model load that failed, a model no repository
//! lists. Each names the backend and the model.

use std::fmt;

use crate::backend::id::BackendId;
use crate::route::ModelId;

/// A model could not be loaded on the backend the balancer placed it on
/// (see [`placement`](crate::placement)): the load call failed, was refused,
/// or did not finish within the placement policy's load timeout. Every
/// request that waited for that load gets this error; the load counts as
/// one failure for the backend's breaker (in its configured scope) and its
/// health, however many requests waited, never as a slow call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModelLoadFailed {
    /// The backend the model was to be loaded on.
    pub backend: BackendId,
    /// The model.
    pub model: ModelId,
    /// What went wrong, e.g. `"timed out after 60s"` or
    /// `"probe answered 500 Internal Server Error"` (the loader's error:
    /// loaders share the probes' error type).
    pub reason: String,
}

impl ModelLoadFailed {
    /// Creates the error.
    pub(crate) fn new(backend: BackendId, model: ModelId, reason: impl Into<String>) -> Self {
        Self {
            backend,
            model,
            reason: reason.into(),
        }
    }

    /// `ModelLoadFailed::new` for the tests of a crate that maps the error (feature
    /// `testing`): not part of the public API.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn for_tests(backend: BackendId, model: ModelId, reason: impl Into<String>) -> Self {
        Self::new(backend, model, reason)
    }
}

impl fmt::Display for ModelLoadFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "loading model `{}` on backend `{}` failed: {}",
            self.model, self.backend, self.reason
        )
    }
}

impl std::error::Error for ModelLoadFailed {}

/// The request names a model that the backend's model repository does not
/// know: with on-demand [`placement`](crate::placement), only models the
/// repository index lists are ever loaded. Returned at once; no load is
/// triggered and the backend's breaker counts nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnknownModel {
    /// The backend whose repository was asked.
    pub backend: BackendId,
    /// The model.
    pub model: ModelId,
}

impl UnknownModel {
    /// Creates the error.
    pub(crate) fn new(backend: BackendId, model: ModelId) -> Self {
        Self { backend, model }
    }

    /// `UnknownModel::new` for the tests of a crate that maps the error (feature
    /// `testing`): not part of the public API.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn for_tests(backend: BackendId, model: ModelId) -> Self {
        Self::new(backend, model)
    }
}

impl fmt::Display for UnknownModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "model `{}` is not in the repository of backend `{}`",
            self.model, self.backend
        )
    }
}

impl std::error::Error for UnknownModel {}
