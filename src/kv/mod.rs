//! Precise prefix-cache routing from the servers' own KV-cache events
//! (feature `kv-events`).
//!
//! vLLM (`--kv-events-config`, publisher `zmq`) publishes each block of
//! tokens it caches (`BlockStored`), evicts (`BlockRemoved`) or drops
//! with its whole cache (`AllBlocksCleared`). This module keeps, per
//! backend, the set of cached blocks those events describe, and lets the
//! balancer ask of a request's prompt how many of its leading blocks a
//! backend holds:
//!
//! * [`PromptBlocks`] (in a request's extensions): the chain of the
//!   prompt's full blocks, each hashed with the whole prefix before it
//!   ([`block_hash`]), so a block matches only with its whole prefix;
//! * [`KvIndex`]: the fleet's index, one bounded, lock-free block set per
//!   backend, read by the balancer's pick and written by the event source;
//! * [`subscribe`]: the event source, one task a backend, on the server's
//!   ZeroMQ publisher ([`KvEndpoint`]), which repairs lost batches from its
//!   replay socket and clears a backend's blocks when its events cannot
//!   be trusted (a reconnection, a restart, batches lost for good).
//! * [`PromptBlocksLayer`] cuts each prompt into those blocks, from its
//!   token IDs ([`Tokenize`]): `prompt::PromptTokenizer` (feature `tokenizer`): a request's prompt
//!   token IDs, as the vLLM server computes them.
//!
//! The hashes are the crate's own (xxh3 over the blocks' token IDs,
//! chained), not vLLM's: vLLM seeds its block hashes per process, so a
//! router cannot compute them, and the events carry each block's token
//! IDs instead.

mod chain;
mod endpoint;
mod events;
mod index;
mod layer;
#[cfg(feature = "tokenizer")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokenizer")))]
pub mod prompt;
mod set;
mod subscriber;
mod tokenize;
mod tracker;

pub use chain::{block_hash, PromptBlocks, ROOT};
pub use endpoint::KvEndpoint;
pub use index::{KvIndex, DEFAULT_BLOCKS_PER_BACKEND};
pub use layer::{PromptBlocksFuture, PromptBlocksLayer, PromptBlocksService};
pub(crate) use set::BlockSet;
pub use subscriber::{subscribe, REPLAY_TIMEOUT, RETRY_MAX, RETRY_MIN};
pub use tokenize::{Tokenize, TokenizeFuture};
