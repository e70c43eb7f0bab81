//! [`ModelLoader`]: how a model is loaded on and unloaded from one backend,
//! and what its repository holds.

use std::future::Future;

use crate::health::probe::{ProbeError, ProbeTarget};
use crate::route::ModelId;

/// The errors of a loader's calls: the same kinds as a probe's (no answer,
/// transport, unexpected status, malformed answer).
pub type LoadError = ProbeError;

/// What a backend's model repository holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Repository {
    /// Every model the repository knows: the allow-list of loads.
    pub known: Vec<ModelId>,
    /// The models loaded and ready to serve now.
    pub resident: Vec<ModelId>,
}

impl Repository {
    /// A repository knowing `known`, of which `resident` are loaded.
    pub fn new(known: Vec<ModelId>, resident: Vec<ModelId>) -> Self {
        Self { known, resident }
    }
}

/// Loads and unloads models on one backend through its own API.
/// Implementations hold what they need (an HTTP client, paths) and clone
/// it into the futures, which own everything they use. The caller applies
/// the timeout.
pub trait ModelLoader: Send + Sync + 'static {
    /// Loads `model` on `target`; resolves once it is ready to serve.
    fn load(
        &self,
        target: &ProbeTarget,
        model: &ModelId,
    ) -> impl Future<Output = Result<(), LoadError>> + Send + 'static;

    /// Unloads `model` from `target`.
    fn unload(
        &self,
        target: &ProbeTarget,
        model: &ModelId,
    ) -> impl Future<Output = Result<(), LoadError>> + Send + 'static;

    /// What `target`'s repository knows and holds.
    fn repository(
        &self,
        target: &ProbeTarget,
    ) -> impl Future<Output = Result<Repository, LoadError>> + Send + 'static;
}
