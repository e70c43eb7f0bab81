//! The body layer's defaults: the body limits, and where the model of a
//! JSON body without one comes from.

use std::fmt;
use std::sync::Arc;

use crate::route::model::ModelId;

/// Default body limit: 1 MiB.
pub(super) const DEFAULT_LIMIT: usize = 1024 * 1024;
/// Largest accepted body limit: 64 MiB.
pub(super) const MAX_LIMIT: usize = 64 * 1024 * 1024;

/// Where the model of a JSON body without one comes from (see
/// [`ModelFromBodyBuilder::default_model`](super::ModelFromBodyBuilder::default_model)): nowhere by default.
#[derive(Clone)]
pub(super) struct DefaultModel(pub(super) Option<Arc<dyn Fn() -> Option<ModelId> + Send + Sync>>);

impl DefaultModel {
    pub(super) const NONE: Self = Self(None);

    /// The model to route a body without one to, if any now.
    pub(super) fn get(&self) -> Option<ModelId> {
        self.0.as_ref().and_then(|f| f())
    }
}

impl fmt::Debug for DefaultModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Some(_) => "DefaultModel(Some(..))",
            None => "DefaultModel(None)",
        })
    }
}
