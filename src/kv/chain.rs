//! The crate's own block hashes: a prompt cut into full blocks of token
//! IDs, each block's hash seeded with its parent's (pure logic).

use std::sync::Arc;

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// The parent hash of a sequence's first block (a base model's, without a
/// LoRA adapter).
pub const ROOT: u64 = 0x6b76_2d65_7665_6e74; // "kv-event"

/// The hash of one block of token IDs whose prefix hashed to `parent`:
/// xxh3-64 of the IDs as 4-byte little-endian integers, seeded with
/// `parent`. Never 0 (0 is an empty slot of the index): a hash of 0
/// becomes 1.
pub fn block_hash(parent: u64, tokens: &[u32]) -> u64 {
    let mut bytes = [0u8; 4 * 256];
    let hash = if tokens.len() <= 256 {
        for (chunk, token) in bytes.chunks_exact_mut(4).zip(tokens) {
            chunk.copy_from_slice(&token.to_le_bytes());
        }
        xxh3_64_with_seed(&bytes[..4 * tokens.len()], parent)
    } else {
        let bytes: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
        xxh3_64_with_seed(&bytes, parent)
    };
    hash.max(1)
}

/// A prompt's full blocks as the index keys them: the chain of
/// [`block_hash`]es from [`ROOT`], one per `block_size` tokens (a
/// partial last block is left out: servers cache whole blocks only).
///
/// The balancer reads it from a request's extensions (feature `balance`);
/// a request without one is routed as before. Cloning shares the hashes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromptBlocks {
    hashes: Arc<[u64]>,
    block_size: u32,
}

impl PromptBlocks {
    /// The blocks of `tokens` at `block_size` tokens a block (the
    /// servers' block size: vLLM's `--block-size`, 16 on GPUs by default,
    /// 128 on its CPU build). A `block_size` of 0 gives no blocks.
    pub fn new(tokens: &[u32], block_size: u32) -> Self {
        let hashes: Arc<[u64]> = match block_size {
            0 => Arc::from([]),
            size => {
                let mut parent = ROOT;
                tokens
                    .chunks_exact(size as usize)
                    .map(|block| {
                        parent = block_hash(parent, block);
                        parent
                    })
                    .collect()
            }
        };
        Self { hashes, block_size }
    }

    /// The chained hashes, first block first.
    pub fn hashes(&self) -> &[u64] {
        &self.hashes
    }

    /// Tokens a block.
    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// How many full blocks.
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    /// Whether the prompt is shorter than one block.
    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_matches_only_with_its_whole_prefix() {
        let a: Vec<u32> = (0..8).collect();
        let mut b = a.clone();
        b[0] = 99; // the first block differs, the second is the same
        let (a, b) = (PromptBlocks::new(&a, 4), PromptBlocks::new(&b, 4));
        assert_eq!(a.len(), 2);
        assert_ne!(a.hashes()[0], b.hashes()[0]);
        assert_ne!(a.hashes()[1], b.hashes()[1]);
    }

    #[test]
    fn a_partial_last_block_is_left_out_and_a_prefix_keeps_its_hashes() {
        let tokens: Vec<u32> = (0..11).collect();
        let blocks = PromptBlocks::new(&tokens, 4);
        assert_eq!(blocks.len(), 2);
        assert_eq!(PromptBlocks::new(&tokens[..8], 4), blocks);
        assert_eq!(blocks.hashes()[0], block_hash(ROOT, &tokens[..4]));
        assert_eq!(
            blocks.hashes()[1],
            block_hash(blocks.hashes()[0], &tokens[4..8])
        );
        assert!(PromptBlocks::new(&tokens, 0).is_empty());
    }

    #[test]
    fn long_blocks_hash_as_short_ones_do() {
        let tokens: Vec<u32> = (0..600).collect();
        let expected = {
            let bytes: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
            xxh3_64_with_seed(&bytes, 7).max(1)
        };
        assert_eq!(block_hash(7, &tokens), expected);
        let short = &tokens[..256];
        let bytes: Vec<u8> = short.iter().flat_map(|t| t.to_le_bytes()).collect();
        assert_eq!(block_hash(7, short), xxh3_64_with_seed(&bytes, 7).max(1));
    }
}
