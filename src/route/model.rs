//! [`ModelId`]: the name of the model (or adapter) a request targets,
//! validated and hashed once.

use std::fmt;
use std::sync::Arc;

use super::error::{InvalidReason, InvalidRoute};

/// The name of the model (or adapter) a request targets.
///
/// Valid IDs are non-empty, at most [`ModelId::MAX_LEN`] bytes of UTF-8, with
/// no whitespace or control characters. The 64-bit xxh3 hash (seed 0) of the
/// ID's bytes is computed once at construction and carried along, so routing
/// never hashes the ID again. Cloning is a reference-count increment.
#[derive(Clone)]
pub struct ModelId {
    pub(super) name: Arc<str>,
    pub(super) hash: u64,
}

impl ModelId {
    /// Largest accepted model ID, in bytes.
    pub const MAX_LEN: usize = 256;

    /// Validates `name` and computes its hash.
    ///
    /// # Errors
    ///
    /// [`InvalidRoute`] with source `model` when `name` is empty, longer than
    /// [`ModelId::MAX_LEN`] bytes, or holds whitespace or a control character.
    pub fn new(name: &str) -> Result<Self, InvalidRoute> {
        let hash = Self::validate("model", name)?;
        Ok(Self {
            name: Arc::from(name),
            hash,
        })
    }

    /// As [`ModelId::new`], with errors naming `source` (`body`, `path`).
    #[cfg(feature = "body")]
    pub(crate) fn from_source(source: &'static str, name: &str) -> Result<Self, InvalidRoute> {
        let hash = Self::validate(source, name)?;
        Ok(Self {
            name: Arc::from(name),
            hash,
        })
    }

    /// The hash of `name` if it is a valid model ID, allocating nothing.
    #[cfg(feature = "balance")]
    pub(crate) fn hash_of(name: &str) -> Option<u64> {
        Self::validate("model", name).ok()
    }

    /// Checks `name` and returns its hash, allocating nothing.
    pub(super) fn validate(source: &'static str, name: &str) -> Result<u64, InvalidRoute> {
        let reason = if name.is_empty() {
            Some(InvalidReason::Empty)
        } else if name.len() > Self::MAX_LEN {
            Some(InvalidReason::TooLong(Self::MAX_LEN))
        } else if !is_graphic(name.as_bytes())
            // Not all visible ASCII: check characters (slower).
            && name.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            Some(InvalidReason::ForbiddenCharacter)
        } else {
            None
        };
        match reason {
            Some(reason) => Err(InvalidRoute::new(source, reason)),
            None => Ok(xxhash_rust::xxh3::xxh3_64(name.as_bytes())),
        }
    }

    /// The hash of `name`, read from a header, when it is a valid model ID
    /// of visible ASCII (the common case): one pass over the bytes, then the
    /// hash. `None` sends the caller to the full checks, which say why.
    #[inline]
    pub(super) fn hash_visible(name: &[u8]) -> Option<u64> {
        let plain = !name.is_empty() && name.len() <= Self::MAX_LEN && is_graphic(name);
        plain.then(|| xxhash_rust::xxh3::xxh3_64(name))
    }

    /// The ID as a string.
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// The xxh3 64-bit hash (seed 0) of the ID's bytes, computed once.
    pub fn hash64(&self) -> u64 {
        self.hash
    }
}

impl PartialEq for ModelId {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.name == other.name
    }
}

impl Eq for ModelId {}

impl std::hash::Hash for ModelId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl fmt::Debug for ModelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.name, f)
    }
}

impl fmt::Display for ModelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl std::str::FromStr for ModelId {
    type Err = InvalidRoute;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

/// Whether every byte of `bytes` is visible ASCII other than space
/// (`!` ..= `~`, as [`u8::is_ascii_graphic`]), eight bytes at a time.
#[inline]
pub(super) fn is_graphic(bytes: &[u8]) -> bool {
    const LOW: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // For bytes below 0x80 no sum carries into the next byte: a byte's
    // high bit after adding 0x5f says it is at least 0x21 (`!`), after
    // adding 0x01 that it is 0x7f (DEL).
    let word = |w: &[u8; 8]| {
        let w = u64::from_ne_bytes(*w);
        w & HIGH == 0
            && w.wrapping_add(0x5f * LOW) & HIGH == HIGH
            && w.wrapping_add(LOW) & HIGH == 0
    };
    match bytes.last_chunk::<8>() {
        None => bytes.iter().all(u8::is_ascii_graphic),
        // The last eight bytes cover what the whole words leave over.
        Some(last) => bytes.as_chunks::<8>().0.iter().all(word) && word(last),
    }
}
