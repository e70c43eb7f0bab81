//! [`PromptTokenizer`]: a request body to the prompt's token IDs.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use minijinja::value::ValueKind;
use minijinja::Value;
use tokenizers::Tokenizer;

use super::body::{bad, field, flag, parse, present};
use super::error::{LoadError, PromptError};
use super::load;
use super::render::{self, Chat};

/// A model's prompt as its vLLM server computes it: the chat template
/// rendered and its text tokenized for `/v1/chat/completions`, the prompt
/// tokenized for `/v1/completions`, with the model's own
/// `tokenizer.json`. The IDs feed [`PromptBlocks::new`](crate::kv::PromptBlocks::new).
///
/// Cloning shares the tokenizer. Tokenizing takes CPU time in the
/// caller's task, about 0.4 µs a token on one core (release build, the
/// tiny test model's byte-level BPE: 90 µs for a chat of 200 tokens,
/// 0.8 ms for 2,000; HF's Python tokenizers take as long, the template
/// about 1 % of it): callers on a latency path may want `spawn_blocking`
/// for long prompts.
#[derive(Clone)]
pub struct PromptTokenizer {
    inner: Arc<Inner>,
}

struct Inner {
    tokenizer: Tokenizer,
    chat: Option<Chat>,
    tool_chat: Option<Chat>,
    special: Vec<(&'static str, String)>,
}

/// Which endpoint a request body is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PromptKind {
    /// `/v1/chat/completions`: a `messages` list through the chat template.
    Chat,
    /// `/v1/completions`: a `prompt`, text or token IDs.
    Completion,
}

impl PromptKind {
    /// The kind of an HTTP path: a path ending in `/chat/completions` is
    /// a chat, one ending in `/completions` a completion; others `None`.
    pub fn of_path(path: &str) -> Option<Self> {
        let path = path.trim_end_matches('/');
        if path.ends_with("/chat/completions") {
            Some(Self::Chat)
        } else if path.ends_with("/completions") {
            Some(Self::Completion)
        } else {
            None
        }
    }
}

impl PromptTokenizer {
    /// Loads the model folder `dir` the servers load (a local copy; no
    /// download): `tokenizer.json` (required), the chat template from
    /// `chat_template.jinja` or else `tokenizer_config.json`'s
    /// `chat_template` (a string, or a list of `{name, template}` of which
    /// `default`, and `tool_use` for requests with tools), and the named
    /// special tokens (`bos_token`, `eos_token`, … as strings or
    /// `{content}` objects, from `tokenizer_config.json` or
    /// `special_tokens_map.json`) the template receives.
    ///
    /// # Errors
    ///
    /// [`LoadError`] when `tokenizer.json` is missing or unreadable, a
    /// JSON file is malformed, or a template does not parse. A folder
    /// without a chat template loads: its chats fail with
    /// [`PromptError::NoTemplate`].
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self, LoadError> {
        let files = load::read(dir.as_ref())?;
        let parse = |source: Option<String>| {
            source
                .map(|s| Chat::new(&s))
                .transpose()
                .map_err(|e| LoadError::Template {
                    reason: e.to_string(),
                })
        };
        Ok(Self {
            inner: Arc::new(Inner {
                tokenizer: files.tokenizer,
                chat: parse(files.template)?,
                tool_chat: parse(files.tool_template)?,
                special: files.special,
            }),
        })
    }

    /// The token IDs of the request `body` sent to `path`: `Ok(None)` for
    /// a path that is neither a chat nor a completion (see
    /// [`PromptKind::of_path`]).
    ///
    /// # Errors
    ///
    /// As [`chat`](Self::chat) and [`completion`](Self::completion).
    pub fn tokens_of(&self, path: &str, body: &[u8]) -> Result<Option<Vec<u32>>, PromptError> {
        match PromptKind::of_path(path) {
            Some(PromptKind::Chat) => self.chat(body).map(Some),
            Some(PromptKind::Completion) => self.completion(body).map(Some),
            None => Ok(None),
        }
    }

    /// The prompt's token IDs of a chat completion request's JSON body,
    /// as vLLM computes them: [`chat_text`](Self::chat_text) tokenized
    /// with special tokens only when the body says
    /// `"add_special_tokens": true` (vLLM's default for chats is `false`:
    /// the template writes them).
    ///
    /// # Errors
    ///
    /// As [`chat_text`](Self::chat_text), and [`PromptError::Tokenizer`].
    pub fn chat(&self, body: &[u8]) -> Result<Vec<u32>, PromptError> {
        let body = parse(body)?;
        let text = self.render(&body)?;
        let special = flag(&body, "add_special_tokens")?.unwrap_or(false);
        self.encode(&text, special)
    }

    /// The text vLLM renders from a chat completion request's JSON body
    /// with the model's chat template: the `messages` (see the module
    /// docs for how their content reaches the template), `tools`,
    /// `documents`, `add_generation_prompt` (default `true`),
    /// `continue_final_message` (default `false`), `reasoning_effort` and
    /// `chat_template_kwargs`, and a request's own `chat_template` (which
    /// vLLM accepts only with `--trust-request-chat-template`).
    ///
    /// # Errors
    ///
    /// [`PromptError::NotARequest`] for a body that is not a chat request,
    /// [`PromptError::Unsupported`] for non-text content,
    /// [`PromptError::NoTemplate`], [`PromptError::Template`].
    pub fn chat_text(&self, body: &[u8]) -> Result<String, PromptError> {
        self.render(&parse(body)?)
    }

    /// The prompt's token IDs of a completion request's JSON body:
    /// `prompt` as text tokenized with special tokens unless the body
    /// says `"add_special_tokens": false` (vLLM's default for completions
    /// is `true`), or as token IDs passed through; a list of one prompt
    /// is that prompt.
    ///
    /// # Errors
    ///
    /// [`PromptError::NotARequest`] without a `prompt`,
    /// [`PromptError::Unsupported`] for a batch of several prompts or
    /// `prompt_embeds`, [`PromptError::Tokenizer`].
    pub fn completion(&self, body: &[u8]) -> Result<Vec<u32>, PromptError> {
        let body = parse(body)?;
        if present(&field(&body, "prompt_embeds")) {
            return Err(PromptError::Unsupported("`prompt_embeds`".into()));
        }
        let special = flag(&body, "add_special_tokens")?.unwrap_or(true);
        let mut prompt = field(&body, "prompt");
        if prompt.kind() == ValueKind::Seq {
            let n = prompt.len().unwrap_or(0);
            let first = prompt.get_item(&Value::from(0)).unwrap_or(Value::UNDEFINED);
            if matches!(first.kind(), ValueKind::String | ValueKind::Seq) {
                if n > 1 {
                    return Err(PromptError::Unsupported(format!("a batch of {n} prompts")));
                }
                prompt = first;
            }
        }
        match prompt.kind() {
            ValueKind::String => self.encode(prompt.as_str().unwrap_or_default(), special),
            ValueKind::Seq => ids(&prompt),
            _ => Err(PromptError::NotARequest(
                "`prompt` is neither text nor token IDs".into(),
            )),
        }
    }

    /// `text`'s token IDs, with the tokenizer's special tokens (its
    /// post-processor's BOS, for one) when `add_special_tokens`.
    ///
    /// # Errors
    ///
    /// [`PromptError::Tokenizer`] when the `tokenizers` library fails.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, PromptError> {
        self.inner
            .tokenizer
            .encode_fast(text, add_special_tokens)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| PromptError::Tokenizer(e.to_string()))
    }
}

impl PromptTokenizer {
    fn render(&self, body: &Value) -> Result<String, PromptError> {
        let inner = &self.inner;
        render::render(
            (inner.chat.as_ref(), inner.tool_chat.as_ref()),
            &inner.special,
            body,
        )
    }
}

impl fmt::Debug for PromptTokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PromptTokenizer")
            .field("vocab", &self.inner.tokenizer.get_vocab_size(true))
            .field("chat_template", &self.inner.chat.is_some())
            .field("tool_use_template", &self.inner.tool_chat.is_some())
            .finish()
    }
}

fn ids(prompt: &Value) -> Result<Vec<u32>, PromptError> {
    let not_ids = || bad("`prompt` holds something other than token IDs");
    prompt
        .try_iter()
        .map_err(|_| not_ids())?
        .map(|id| {
            id.as_i64()
                .filter(|_| id.is_integer())
                .and_then(|i| u32::try_from(i).ok())
                .ok_or_else(not_ids)
        })
        .collect()
}

/// The largest body [`PromptTokenizer`]'s [`Tokenize`](crate::kv::Tokenize)
/// tokenizes: 1 MiB, about 250,000 tokens of English, past any context a
/// server serves. A larger one is routed without blocks (the server
/// refuses it anyway), rather than hold a thread for its tokenizing.
pub const MAX_PROMPT_BYTES: usize = 1 << 20;

impl crate::kv::Tokenize for PromptTokenizer {
    /// [`tokens_of`](Self::tokens_of) on tokio's blocking pool: tokenizing
    /// takes about 0.4 µs a token, which a long prompt would otherwise
    /// spend on the runtime's worker. A body over [`MAX_PROMPT_BYTES`] is
    /// an [`Unsupported`](PromptError::Unsupported) error, not tokenized.
    fn tokenize<'a>(
        &'a self,
        path: &'a str,
        body: &'a bytes::Bytes,
    ) -> crate::kv::TokenizeFuture<'a> {
        if body.len() > MAX_PROMPT_BYTES {
            let why = format!("a body of {} bytes, over {MAX_PROMPT_BYTES}", body.len());
            return Box::pin(std::future::ready(
                Err(PromptError::Unsupported(why).into()),
            ));
        }
        let (this, path, body) = (self.clone(), path.to_owned(), body.clone());
        Box::pin(async move {
            let tokens = tokio::task::spawn_blocking(move || this.tokens_of(&path, &body)).await?;
            Ok(tokens?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::PromptKind;

    #[test]
    fn the_kind_of_a_path() {
        assert_eq!(
            PromptKind::of_path("/v1/chat/completions"),
            Some(PromptKind::Chat)
        );
        assert_eq!(
            PromptKind::of_path("/v1/completions/"),
            Some(PromptKind::Completion)
        );
        assert_eq!(PromptKind::of_path("/v1/embeddings"), None);
    }
}
