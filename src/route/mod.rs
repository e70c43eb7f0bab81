//! Route info: what the balancer needs to know about one request.
//!
//! ```
//! use tower_model_balance::route::{RequestKind, RouteInfo, Urgency};
//!
//! let req = http::Request::post("/v2/models/resnet/infer")
//!     .header("x-model-id", "resnet-50")
//!     .header("x-request-kind", "update")
//!     .header("content-length", "1024")
//!     .body(())
//!     .unwrap();
//! let route = RouteInfo::from_request(&req).unwrap();
//! assert_eq!(route.model.as_str(), "resnet-50");
//! assert_eq!(route.kind, RequestKind::Update);
//! assert_eq!(route.urgency, Urgency::Normal);
//! assert_eq!(route.payload_bytes, Some(1024));
//!
//! let bad = http::Request::get("/").header("x-model-id", "two words").body(()).unwrap();
//! let err = RouteInfo::from_request(&bad).unwrap_err();
//! assert_eq!(err.source, "x-model-id");
//! ```
//!
//! A request's [`RouteInfo`] is read once: from the request's extensions when
//! an earlier layer put one there, else from its headers:
//!
//! | header | value | default |
//! | --- | --- | --- |
//! | `x-model-id` | the model ID (required), see [`ModelId`] | — |
//! | `x-request-kind` | `inference` or `update` (any case) | `inference` |
//! | `x-urgency` | `normal`, `high` or `critical` (any case) | `normal` |
//! | `content-length` | payload size in bytes | unknown |
//!
//! A missing model ID, any invalid value or a header given more than once is
//! an [`InvalidRoute`] naming the header and the reason; nothing panics on
//! input.
//!
//! When the model ID is not in a header — an OpenAI-compatible JSON body
//! (`{"model": "llama-3-8b", ...}`) or a KServe v2 path
//! (`/v2/models/{name}/infer`) — put `route::ModelFromBodyLayer` (feature `body`)
//! in front: it reads the ID from there and stores the `RouteInfo` in the
//! request's extensions. The headers above are the client's to set: at a
//! trust boundary, its `strip_routing_headers(true)` ignores and removes
//! them, so that a client cannot pick the backend, the kind or the
//! urgency of its own requests.

use std::fmt;
use std::sync::Arc;

use http::header::{HeaderMap, HeaderName};
use http::{Extensions, Request};

use self::error::{InvalidReason, InvalidRoute};

#[cfg(feature = "body")]
#[cfg_attr(docsrs, doc(cfg(feature = "body")))]
pub mod body;
#[cfg(feature = "body")]
#[cfg_attr(docsrs, doc(cfg(feature = "body")))]
pub use body::{ModelFromBody, ModelFromBodyBuilder, ModelFromBodyLayer};
pub(crate) mod error;
mod prefix;
mod routable;
#[cfg(test)]
mod tests;
mod view;

pub use self::prefix::PrefixKey;
pub use self::routable::Routable;
use self::view::is_graphic;
pub use self::view::Route;
pub(crate) use self::view::RouteView;
#[cfg(feature = "body")]
use self::view::Traits;

/// Header carrying the model ID.
pub const MODEL_ID_HEADER: HeaderName = HeaderName::from_static("x-model-id");
/// Header carrying the request kind (`inference` or `update`).
pub const REQUEST_KIND_HEADER: HeaderName = HeaderName::from_static("x-request-kind");
/// Header carrying the urgency (`normal`, `high` or `critical`).
pub const URGENCY_HEADER: HeaderName = HeaderName::from_static("x-urgency");

/// The name of the model (or adapter) a request targets.
///
/// Valid IDs are non-empty, at most [`ModelId::MAX_LEN`] bytes of UTF-8, with
/// no whitespace or control characters. The 64-bit xxh3 hash (seed 0) of the
/// ID's bytes is computed once at construction and carried along, so routing
/// never hashes the ID again. Cloning is a reference-count increment.
#[derive(Clone)]
pub struct ModelId {
    name: Arc<str>,
    hash: u64,
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
    fn validate(source: &'static str, name: &str) -> Result<u64, InvalidRoute> {
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
    fn hash_visible(name: &[u8]) -> Option<u64> {
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

/// What a request does: inference is routed by model affinity, an update
/// (online learning, index write) by load alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum RequestKind {
    /// Reads the model: routed to a backend that holds it (the default).
    #[default]
    Inference,
    /// Writes: no locality, routed to a less loaded backend (P2C).
    Update,
}

/// How much the caller cares about latency for this request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[non_exhaustive]
pub enum Urgency {
    /// Ordinary traffic (the default).
    #[default]
    Normal,
    /// Latency-sensitive traffic.
    High,
    /// Traffic that must not be delayed.
    Critical,
}

/// Routing metadata of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RouteInfo {
    /// The model the request targets.
    pub model: ModelId,
    /// Inference or update; default inference.
    pub kind: RequestKind,
    /// Urgency; default normal.
    pub urgency: Urgency,
    /// Payload size in bytes, if known (from `content-length`).
    pub payload_bytes: Option<u64>,
    /// What the request shares with earlier ones beyond its model (a
    /// prompt's prefix, a conversation), if known: a balancer routes by it
    /// in place of the model ID (see [`PrefixKey`]). Default `None`; set by
    /// [`ModelFromBodyBuilder::prefix_bytes`] or
    /// [`RouteInfo::with_prefix`], never read from a header.
    pub prefix: Option<PrefixKey>,
}

impl RouteInfo {
    /// Route info for an inference request of normal urgency and unknown
    /// size.
    pub fn new(model: ModelId) -> Self {
        Self {
            model,
            kind: RequestKind::default(),
            urgency: Urgency::default(),
            payload_bytes: None,
            prefix: None,
        }
    }

    /// Sets the request kind.
    pub fn with_kind(mut self, kind: RequestKind) -> Self {
        self.kind = kind;
        self
    }

    /// Sets the urgency.
    pub fn with_urgency(mut self, urgency: Urgency) -> Self {
        self.urgency = urgency;
        self
    }

    /// Sets the prefix key: the balancer routes the request by its group
    /// (and session) in place of the model ID.
    pub fn with_prefix(mut self, key: PrefixKey) -> Self {
        self.prefix = Some(key);
        self
    }

    /// Sets the payload size in bytes.
    pub fn with_payload_bytes(mut self, bytes: u64) -> Self {
        self.payload_bytes = Some(bytes);
        self
    }

    /// Reads the route info of `req`: a `RouteInfo` in its extensions if
    /// present, else its headers (see the [module docs](self)).
    ///
    /// # Errors
    ///
    /// [`InvalidRoute`] naming the header when `x-model-id` is missing or any
    /// header holds an invalid value.
    pub fn from_request<B>(req: &Request<B>) -> Result<Self, InvalidRoute> {
        Self::from_parts(req.extensions(), req.headers())
    }

    /// As [`RouteInfo::from_request`], from a request's extensions and
    /// headers.
    ///
    /// # Errors
    ///
    /// As [`RouteInfo::from_request`].
    pub fn from_parts(extensions: &Extensions, headers: &HeaderMap) -> Result<Self, InvalidRoute> {
        RouteView::from_parts(extensions, headers).map(|view| view.to_owned())
    }

    /// Reads the route info from headers alone.
    ///
    /// # Errors
    ///
    /// As [`RouteInfo::from_request`].
    pub fn from_headers(headers: &HeaderMap) -> Result<Self, InvalidRoute> {
        RouteView::from_headers(headers).map(|view| view.to_owned())
    }
}
