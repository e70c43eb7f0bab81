//! [`Tokenize`]: where a prompt's token IDs come from.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;

use crate::error::common::BoxError;

/// The future of [`Tokenize::tokenize`].
pub type TokenizeFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Option<Vec<u32>>, BoxError>> + Send + 'a>>;

/// Turns a request's body into the token IDs its server will see for the
/// prompt: the chat template applied and tokenized as the server does
/// (feature `tokenizer`: `PromptTokenizer`, from the model's own files),
/// or asked of a server.
///
/// `Ok(None)`: the request has no prompt this source reads (an
/// embeddings body, a KServe v2 path); an error: the prompt could not be
/// tokenized. Either way [`PromptBlocksLayer`](super::PromptBlocksLayer)
/// hands the request on without [`PromptBlocks`](super::PromptBlocks): a
/// routing hint is never a reason to fail a request.
pub trait Tokenize: Send + Sync + 'static {
    /// The prompt's token IDs of a request to `path` (the URI's path)
    /// whose body is `body`.
    fn tokenize<'a>(&'a self, path: &'a str, body: &'a Bytes) -> TokenizeFuture<'a>;
}
