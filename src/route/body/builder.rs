//! [`ModelFromBodyLayer`] and its builder: the body limit, the routing
//! headers at a trust boundary, and where the prefix key comes from.

use std::sync::Arc;

use tower_layer::Layer;

use super::defaults::{DefaultModel, DEFAULT_LIMIT, MAX_LIMIT};
use super::key::{PrefixSource, MAX_PREFIX_BYTES};
use super::service::ModelFromBody;
use crate::error::common::InvalidConfig;
#[cfg(doc)]
use crate::error::common::PayloadTooLarge;
#[cfg(doc)]
use crate::route::error::InvalidRoute;
use crate::route::model::ModelId;
#[cfg(doc)]
use crate::route::prefix::PrefixKey;
#[cfg(doc)]
use crate::route::view::RouteInfo;
use http::header::HeaderName;

/// Wraps a service in [`ModelFromBody`]. Build one with
/// [`ModelFromBodyLayer::builder`], or take the default (1 MiB limit,
/// client routing headers trusted, no prefix key).
#[derive(Debug, Clone)]
pub struct ModelFromBodyLayer {
    limit: usize,
    strip_routing_headers: bool,
    prefix: PrefixSource,
    default_model: DefaultModel,
}

impl ModelFromBodyLayer {
    /// A layer with the default body limit of 1 MiB, reading the client's
    /// routing headers.
    pub const fn new() -> Self {
        Self {
            limit: DEFAULT_LIMIT,
            strip_routing_headers: false,
            prefix: PrefixSource::OFF,
            default_model: DefaultModel::NONE,
        }
    }

    /// A builder for a layer with another body limit, or one that ignores
    /// and strips the client's routing headers.
    pub const fn builder() -> ModelFromBodyBuilder {
        ModelFromBodyBuilder {
            limit: DEFAULT_LIMIT,
            strip_routing_headers: false,
            prefix: PrefixSource::OFF,
            default_model: DefaultModel::NONE,
        }
    }

    /// The body limit, in bytes.
    #[cfg(test)]
    pub(crate) const fn limit(&self) -> usize {
        self.limit
    }
}

impl Default for ModelFromBodyLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl<S> Layer<S> for ModelFromBodyLayer {
    type Service = ModelFromBody<S>;
    fn layer(&self, inner: S) -> Self::Service {
        ModelFromBody {
            inner,
            limit: self.limit,
            strip_routing_headers: self.strip_routing_headers,
            prefix: self.prefix.clone(),
            default_model: self.default_model.clone(),
        }
    }
}

/// Builds a [`ModelFromBodyLayer`], checking its values.
#[derive(Debug, Clone)]
pub struct ModelFromBodyBuilder {
    limit: usize,
    strip_routing_headers: bool,
    prefix: PrefixSource,
    default_model: DefaultModel,
}

impl ModelFromBodyBuilder {
    /// The most body bytes buffered; a longer body is a [`PayloadTooLarge`]
    /// error. Bytes, 1 to 64 MiB; default 1 MiB.
    pub const fn limit(mut self, bytes: usize) -> Self {
        self.limit = bytes;
        self
    }

    /// Whether the client's routing headers are ignored and removed: on a
    /// trust boundary (a gateway in front of clients), `true`. Default
    /// `false`.
    ///
    /// With `true`, `x-model-id`, `x-request-kind` and `x-urgency` are
    /// removed from every request before anything is read: the model comes
    /// from the body or the KServe v2 path only, the kind is `inference`
    /// and the urgency `normal`, and the headers do not reach the backend.
    /// Otherwise a client could send any model to any backend (forcing
    /// cold loads there), skip the load cap with `critical`, and have its
    /// traffic counted against another model. A [`RouteInfo`] extension
    /// is still honoured: extensions are put there by the server's own
    /// code, never by a client.
    ///
    /// With `false`, a request with an `x-model-id` is routed by it (its
    /// body not parsed), and kind and urgency are read from the headers:
    /// for clients inside the trust boundary.
    pub const fn strip_routing_headers(mut self, strip: bool) -> Self {
        self.strip_routing_headers = strip;
        self
    }

    /// Reads a [`PrefixKey`] for each request: its group from the first
    /// `bytes` bytes of the prompt — an OpenAI chat body's `messages` in
    /// order (each message's `role`, a newline, its text, a newline; text
    /// parts of a list `content` concatenated) or a completion body's
    /// `prompt` (a string; of a list, the first) — under the model ID
    /// (which names the LoRA adapter too, in vLLM's and SGLang's APIs).
    /// Bytes, 0 to 64 KiB; default 0 (no prefix key from the prompt).
    ///
    /// Choose it as KubeAI's `prefixCharLength` or SGLang's
    /// `--cache-threshold` are chosen: long enough to tell the system
    /// prompts and shared documents apart (a few hundred bytes), short
    /// enough that the later turns of a conversation, which resend its
    /// first, keep its group. A body whose prompt is empty, in a shape not
    /// listed, or one the capture cannot read (a string that is not UTF-8)
    /// gets no key and is routed by its model (the server judges the body;
    /// the key is a routing hint, never an error). A prompt shorter than
    /// `bytes` is a group of its own — with a session, the session's (see
    /// [`session_header`](Self::session_header)). A KServe v2 path has no
    /// prompt, and no key.
    pub fn prefix_bytes(mut self, bytes: usize) -> Self {
        self.prefix.bytes = bytes;
        self
    }

    /// A header naming the conversation a request continues (as
    /// `x-session-id`), read for a request with a prompt (an OpenAI chat
    /// or completion body; never a KServe v2 path). With a prompt that
    /// fills [`prefix_bytes`](Self::prefix_bytes), its value becomes the
    /// key's [session](PrefixKey::with_session) within the prompt's
    /// group, so that the conversation's turns go back to the backend
    /// that served the last one. With a shorter prompt (a conversation
    /// that opened with "hi"), or without `prefix_bytes`, the session is
    /// the group ([`PrefixKey::from_session`]): the turns stay together,
    /// and move at most once, to the prompt's group, when the
    /// conversation grows past `prefix_bytes`. Default none.
    ///
    /// The value is the client's: at most 256 bytes, once; an empty,
    /// repeated or longer value is an [`InvalidRoute`] from `session`. It
    /// reaches the backend unchanged. A client chooses its prompt and its
    /// session, and so its group's owners: use prefix keys for models that
    /// every backend serves (an LLM fleet), where a group's owners change
    /// what is cached, not what is loaded; the bounded-load cap holds
    /// whatever the client sends.
    pub fn session_header(mut self, name: HeaderName) -> Self {
        self.prefix.session = Some(name);
        self
    }

    /// The model of a JSON body with no `model` field (or a `null` one),
    /// as vLLM and SGLang serve their only model to such a request: `model`
    /// is called once for each such body, and what it returns routes it;
    /// `None` keeps the [`InvalidRoute`] (`body`, `Missing`). The body goes
    /// on unchanged (the server picks its model as it does alone), and its
    /// prompt still makes its prefix key. Default: none, every body must
    /// name its model.
    ///
    /// A gateway in front of a fleet that serves one model passes a
    /// function reading the fleet's models, returning that model while it
    /// is the only one. A function that blocks or takes a lock held long
    /// delays every such request: read a snapshot (an atomic, an
    /// `ArcSwap`).
    pub fn default_model(
        mut self,
        model: impl Fn() -> Option<ModelId> + Send + Sync + 'static,
    ) -> Self {
        self.default_model = DefaultModel(Some(Arc::new(model)));
        self
    }

    /// The layer.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming `limit` when it is 0 or over 64 MiB, or
    /// `prefix_bytes` when it is over 64 KiB.
    pub fn build(self) -> Result<ModelFromBodyLayer, InvalidConfig> {
        if self.limit == 0 || self.limit > MAX_LIMIT {
            return Err(InvalidConfig::new("limit", "1 to 67108864 bytes (64 MiB)"));
        }
        if self.prefix.bytes > MAX_PREFIX_BYTES {
            return Err(InvalidConfig::new("prefix_bytes", "0 to 65536 bytes"));
        }
        Ok(self.checked())
    }

    /// The layer, once the values are known to be valid.
    fn checked(self) -> ModelFromBodyLayer {
        ModelFromBodyLayer {
            limit: self.limit,
            strip_routing_headers: self.strip_routing_headers,
            prefix: self.prefix,
            default_model: self.default_model,
        }
    }
}
