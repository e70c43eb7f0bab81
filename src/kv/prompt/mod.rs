//! A request's prompt token IDs, computed as the vLLM server that will
//! serve it computes them (feature `tokenizer`), for the
//! [`PromptBlocks`](super::PromptBlocks) the balancer matches against
//! the servers' cached blocks.
//!
//! A block matches only if every token before it is the server's, so
//! the router must reproduce vLLM's prompt exactly:
//!
//! * `/v1/chat/completions`: the `messages` become the conversation
//!   vLLM 0.32 gives the model's chat template (`vllm.renderers.
//!   chat_utils.parse_chat_messages`: text parts joined with `"\n"` for a
//!   template reading `content` as a string, kept as a list for one
//!   looping over it), the template is rendered as transformers renders
//!   it (Jinja with `trim_blocks`, `lstrip_blocks`, the special tokens
//!   `bos_token`, `eos_token`, … as variables, `raise_exception`,
//!   `strftime_now`, a Python `tojson`), and the text is tokenized
//!   **without** special tokens (vLLM's `add_special_tokens` defaults to
//!   `false` for chats: the template writes BOS itself);
//! * `/v1/completions`: a text `prompt` is tokenized **with** special
//!   tokens (`add_special_tokens` defaults to `true`), token IDs pass
//!   through.
//!
//! Both tokenize with the model folder's own `tokenizer.json`, through
//! the Rust `tokenizers` library that HF's Python tokenizers wrap.
//!
//! ```no_run
//! use tower_model_balance::kv::{prompt::PromptTokenizer, PromptBlocks};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let tokenizer = PromptTokenizer::from_dir("/models/llama-3.1-8b-instruct")?;
//! let body = br#"{"model": "llama", "messages": [{"role": "user", "content": "Hi"}]}"#;
//! if let Some(ids) = tokenizer.tokens_of("/v1/chat/completions", body)? {
//!     let blocks = PromptBlocks::new(&ids, 16);
//!     println!("{} full blocks", blocks.len());
//! }
//! # Ok(())
//! # }
//! ```
//!
//! What is not reproduced: multimodal content (an image's placeholder
//! tokens are the model processor's: [`PromptError::Unsupported`]),
//! truncation (`truncate_prompt_tokens`; a prompt past the model's
//! context is rejected by the server anyway), Mistral's own tokenizer
//! (`--tokenizer-mode mistral`) and templates that need Jinja features
//! minijinja lacks (the error says which).

mod body;
mod clock;
mod error;
mod json;
mod load;
mod messages;
mod render;
mod template;
mod tokenizer;

pub use error::{LoadError, PromptError};
pub use tokenizer::{PromptKind, PromptTokenizer, MAX_PROMPT_BYTES};
