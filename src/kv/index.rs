//! [`KvIndex`]: the fleet's cached blocks, one [`BlockSet`] per backend.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};

use super::chain::PromptBlocks;
use super::set::BlockSet;
use crate::backend::BackendId;

/// Blocks a backend's set has room for by default: 32,768 (512 KiB of
/// slots a backend). A vLLM server on an 80 GB GPU holding an 8B model
/// caches about 30,000 blocks of 16 tokens.
pub const DEFAULT_BLOCKS_PER_BACKEND: usize = 32_768;

/// What each backend's prefix cache holds, as its KV-cache events said:
/// one bounded, lock-free block set per backend, and the servers' block
/// size as the events give it.
///
/// Shared by the event source, which writes it, the balancer, which reads
/// it on each pick without a lock, and the layer that cuts prompts into
/// [`PromptBlocks`], which reads the block size. Cloning shares the index.
#[derive(Clone)]
pub struct KvIndex {
    inner: Arc<Inner>,
}

struct Inner {
    sets: Mutex<HashMap<BackendId, Arc<BlockSet>>>,
    blocks_per_backend: usize,
    block_size: AtomicU32,
}

impl KvIndex {
    /// An empty index with room for about `blocks_per_backend` blocks a
    /// backend (16 bytes each; at least 2). Past its room a backend's set
    /// forgets its oldest-placed blocks first where they collide: it errs
    /// toward "not cached".
    pub fn new(blocks_per_backend: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                sets: Mutex::new(HashMap::new()),
                blocks_per_backend: blocks_per_backend.max(2),
                block_size: AtomicU32::new(0),
            }),
        }
    }

    /// Blocks a backend's set has room for.
    pub fn blocks_per_backend(&self) -> usize {
        self.inner.blocks_per_backend
    }

    /// Backend `id`'s set, made empty on first use.
    pub(crate) fn set(&self, id: &BackendId) -> Arc<BlockSet> {
        let mut sets = self
            .inner
            .sets
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        sets.entry(id.clone())
            .or_insert_with(|| Arc::new(BlockSet::new(self.inner.blocks_per_backend)))
            .clone()
    }

    /// Forgets what backend `id` holds (its server restarted, cleared its
    /// cache, left the fleet, or events were lost).
    pub fn clear(&self, id: &BackendId) {
        let sets = self
            .inner
            .sets
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(set) = sets.get(id) {
            set.clear();
        }
    }

    /// How many of `blocks`' leading blocks backend `id` holds.
    pub fn matched(&self, id: &BackendId, blocks: &PromptBlocks) -> usize {
        let sets = self
            .inner
            .sets
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        sets.get(id).map_or(0, |set| set.matched(blocks.hashes()))
    }

    /// How many blocks backend `id` holds (a scan of its set).
    pub fn blocks(&self, id: &BackendId) -> usize {
        let sets = self
            .inner
            .sets
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        sets.get(id).map_or(0, |set| set.len())
    }

    /// The servers' block size in tokens, once an event gave it.
    pub fn block_size(&self) -> Option<u32> {
        match self.inner.block_size.load(Relaxed) {
            0 => None,
            size => Some(size),
        }
    }

    /// Notes the block size an event gave; the first one wins (a fleet of
    /// one model shares one block size).
    pub(crate) fn learn_block_size(&self, size: u32) -> bool {
        let _ = self
            .inner
            .block_size
            .compare_exchange(0, size, Relaxed, Relaxed);
        self.inner.block_size.load(Relaxed) == size
    }
}

impl Default for KvIndex {
    /// [`DEFAULT_BLOCKS_PER_BACKEND`] a backend.
    fn default() -> Self {
        Self::new(DEFAULT_BLOCKS_PER_BACKEND)
    }
}

impl PartialEq for KvIndex {
    /// The same index (clones of one).
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl fmt::Debug for KvIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KvIndex")
            .field("blocks_per_backend", &self.inner.blocks_per_backend)
            .field("block_size", &self.block_size())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backend_s_blocks_match_until_cleared() {
        let index = KvIndex::new(64);
        let id = BackendId::new("vllm-0").unwrap();
        let prompt = PromptBlocks::new(&(0..40).collect::<Vec<u32>>(), 16);
        assert_eq!(index.matched(&id, &prompt), 0);
        let set = index.set(&id);
        set.insert(prompt.hashes()[0]);
        assert_eq!(index.matched(&id, &prompt), 1);
        assert_eq!(index.blocks(&id), 1);
        index.clear(&id);
        assert_eq!(index.matched(&id, &prompt), 0);
    }

    #[test]
    fn the_first_block_size_wins() {
        let index = KvIndex::default();
        assert_eq!(index.block_size(), None);
        assert!(index.learn_block_size(128));
        assert!(!index.learn_block_size(16));
        assert_eq!(index.block_size(), Some(128));
    }
}
