//! Backend identity: [`BackendId`].
//!
//! ```
//! use tower_model_balance::backend::BackendId;
//!
//! let id = BackendId::new("gpu-node-07:8000").unwrap();
//! assert_eq!(id.as_str(), "gpu-node-07:8000");
//! assert!(BackendId::new("").is_err());
//! assert!(BackendId::new("gpu node 7").is_err());
//! ```

use std::fmt;
use std::sync::Arc;

use crate::error::common::InvalidConfig;

/// Identifies one backend (a model-server replica) by canonical string
/// bytes, for example `host:port` or a pod name.
///
/// The ring hashes these bytes (never `std::hash::Hash`), so the same ID
/// lands on the same ring points in every process and Rust version. Cloning
/// is a reference-count increment.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BackendId(Arc<str>);

impl BackendId {
    /// Largest accepted ID, in bytes.
    pub const MAX_LEN: usize = 1024;

    /// Creates an ID.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] with field `backend_id` when `id` is empty, longer
    /// than [`BackendId::MAX_LEN`] bytes, or holds whitespace or a control
    /// character.
    pub fn new(id: &str) -> Result<Self, InvalidConfig> {
        let forbidden = |c: char| c.is_control() || c.is_whitespace();
        if id.is_empty() || id.len() > Self::MAX_LEN || id.chars().any(forbidden) {
            return Err(InvalidConfig::new(
                "backend_id",
                "1 to 1024 bytes without whitespace or control characters",
            ));
        }
        Ok(Self(Arc::from(id)))
    }

    /// The ID as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The canonical bytes the ring hashes.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl fmt::Debug for BackendId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for BackendId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
