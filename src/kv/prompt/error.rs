//! The errors of loading a tokenizer and of tokenizing a request.

use std::fmt;
use std::path::PathBuf;

/// [`PromptTokenizer::from_dir`](super::PromptTokenizer::from_dir) could
/// not load the model's tokenizer or chat template.
#[derive(Debug)]
#[non_exhaustive]
pub enum LoadError {
    /// A file could not be read.
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `tokenizer_config.json` is not the JSON it should be.
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// `tokenizer.json` could not be loaded by the `tokenizers` library.
    Tokenizer {
        /// The file.
        path: PathBuf,
        /// The library's message.
        reason: String,
    },
    /// The chat template does not parse as a Jinja template.
    Template {
        /// minijinja's message.
        reason: String,
    },
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, source } => write!(f, "reading {}: {source}", path.display()),
            Self::Config { path, reason } => write!(f, "{}: {reason}", path.display()),
            Self::Tokenizer { path, reason } => {
                write!(f, "loading the tokenizer {}: {reason}", path.display())
            }
            Self::Template { reason } => write!(f, "the chat template does not parse: {reason}"),
        }
    }
}

impl std::error::Error for LoadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// A request's prompt could not be turned into token IDs. The server
/// would reject most of these requests too (vLLM answers 400).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PromptError {
    /// The body is not JSON, or not the request the endpoint takes (no
    /// `messages` list for a chat, no `prompt` for a completion), or a
    /// field has the wrong type; the message names it.
    NotARequest(String),
    /// A request the router cannot tokenize as the server will: a
    /// content part that is not text (images and audio become the
    /// multimodal processor's placeholder tokens), a batch of several
    /// prompts.
    Unsupported(String),
    /// A chat request, but the model folder has no chat template.
    NoTemplate,
    /// The chat template failed to render (an error it raised with
    /// `raise_exception`, a missing variable it needs, an unsupported
    /// construct), or the request asks for what the template cannot do
    /// (`continue_final_message` with `add_generation_prompt`).
    Template(String),
    /// The `tokenizers` library failed on the text.
    Tokenizer(String),
}

impl fmt::Display for PromptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotARequest(why) => write!(f, "not a prompt request: {why}"),
            Self::Unsupported(what) => write!(f, "unsupported: {what}"),
            Self::NoTemplate => f.write_str("the model has no chat template"),
            Self::Template(why) => write!(f, "chat template: {why}"),
            Self::Tokenizer(why) => write!(f, "tokenizer: {why}"),
        }
    }
}

impl std::error::Error for PromptError {}
