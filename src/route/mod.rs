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
//! request's extensions.

use std::fmt;
use std::sync::Arc;

use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Extensions, Request};

use crate::backend::Exclude;
use crate::error::{InvalidReason, InvalidRoute};

#[cfg(feature = "body")]
#[cfg_attr(docsrs, doc(cfg(feature = "body")))]
pub mod body;
#[cfg(feature = "body")]
#[cfg_attr(docsrs, doc(cfg(feature = "body")))]
pub use body::{ModelFromBody, ModelFromBodyBuilder, ModelFromBodyLayer};

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

/// Route info read from a request without allocating: the model ID is
/// borrowed from the header (or from a `RouteInfo` extension), validated,
/// with its hash. The balancer routes on this; an owned [`RouteInfo`] or
/// [`ModelId`] is made only where one is kept (an error, a test).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RouteView<'a> {
    pub(crate) model: &'a str,
    pub(crate) hash: u64,
    pub(crate) kind: RequestKind,
    pub(crate) urgency: Urgency,
    pub(crate) payload_bytes: Option<u64>,
    /// A backend not to pick, from an [`Exclude`] extension (a hedge's
    /// backup).
    pub(crate) exclude: Option<&'a Exclude>,
}

impl<'a> RouteView<'a> {
    /// As [`RouteInfo::from_parts`], borrowing; also reads an [`Exclude`]
    /// extension.
    #[inline]
    pub(crate) fn from_parts(
        extensions: &'a Extensions,
        headers: &'a HeaderMap,
    ) -> Result<Self, InvalidRoute> {
        if extensions.is_empty() {
            return Self::from_headers(headers);
        }
        let mut view = match extensions.get::<RouteInfo>() {
            Some(route) => Self::from(route),
            None => Self::from_headers(headers)?,
        };
        view.exclude = extensions.get::<Exclude>();
        Ok(view)
    }

    /// As [`RouteInfo::from_headers`], borrowing. One pass over the
    /// headers (cheaper than four hashed lookups for the few headers a
    /// request carries), then the checks in a fixed order: model ID, kind,
    /// urgency, size.
    #[inline]
    pub(crate) fn from_headers(headers: &'a HeaderMap) -> Result<Self, InvalidRoute> {
        let found = Found::scan(headers);
        let (model, hash) = match found.plain_model() {
            Some(plain) => plain,
            None => match found.text(MODEL)? {
                Some(text) => (text, ModelId::validate("x-model-id", text)?),
                None => return Err(InvalidRoute::new("x-model-id", InvalidReason::Missing)),
            },
        };
        let traits = Traits::from_found(&found)?;
        Ok(Self {
            model,
            hash,
            kind: traits.kind,
            urgency: traits.urgency,
            payload_bytes: traits.payload_bytes,
            exclude: None,
        })
    }

    /// The model ID, owned (allocates).
    pub(crate) fn model_id(&self) -> ModelId {
        ModelId {
            name: Arc::from(self.model),
            hash: self.hash,
        }
    }

    /// The route info, owned (allocates).
    pub(crate) fn to_owned(self) -> RouteInfo {
        RouteInfo {
            model: self.model_id(),
            kind: self.kind,
            urgency: self.urgency,
            payload_bytes: self.payload_bytes,
        }
    }
}

/// Everything in a route but the model ID: kind, urgency and size, read from
/// `x-request-kind`, `x-urgency` and `content-length` with the rules of
/// [`RouteInfo::from_headers`]. Shared by the header route and by layers
/// that find the model ID elsewhere (the body, the KServe v2 path).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Traits {
    pub(crate) kind: RequestKind,
    pub(crate) urgency: Urgency,
    pub(crate) payload_bytes: Option<u64>,
}

impl Traits {
    /// Reads the traits from `headers`, ignoring `x-model-id`.
    #[cfg(feature = "body")]
    pub(crate) fn from_headers(headers: &HeaderMap) -> Result<Self, InvalidRoute> {
        Self::from_found(&Found::scan(headers))
    }

    /// The checks in a fixed order: kind, urgency, size.
    fn from_found(found: &Found<'_>) -> Result<Self, InvalidRoute> {
        // A known word is ASCII text: matched on the bytes, with the text
        // checked only to tell a value that is not text from an unknown one.
        // The lowercase words, as clients send them, compare as a few
        // words of memory; other cases byte by byte.
        let kind = match found.bytes(KIND)? {
            None | Some(b"inference") => RequestKind::Inference,
            Some(b"update") => RequestKind::Update,
            Some(b) if b.eq_ignore_ascii_case(b"inference") => RequestKind::Inference,
            Some(b) if b.eq_ignore_ascii_case(b"update") => RequestKind::Update,
            Some(_) => return Err(found.unknown(KIND)),
        };
        let urgency = match found.bytes(URGENCY)? {
            None | Some(b"normal") => Urgency::Normal,
            Some(b"high") => Urgency::High,
            Some(b"critical") => Urgency::Critical,
            Some(b) if b.eq_ignore_ascii_case(b"normal") => Urgency::Normal,
            Some(b) if b.eq_ignore_ascii_case(b"high") => Urgency::High,
            Some(b) if b.eq_ignore_ascii_case(b"critical") => Urgency::Critical,
            Some(_) => return Err(found.unknown(URGENCY)),
        };
        let payload_bytes = match found.text(LENGTH)? {
            None => None,
            Some(t) => Some(
                t.parse::<u64>()
                    .map_err(|_| unrecognized("content-length"))?,
            ),
        };
        Ok(Self {
            kind,
            urgency,
            payload_bytes,
        })
    }

    /// The route info for `model` with these traits.
    #[cfg(feature = "body")]
    pub(crate) fn route(self, model: ModelId) -> RouteInfo {
        RouteInfo {
            model,
            kind: self.kind,
            urgency: self.urgency,
            payload_bytes: self.payload_bytes,
        }
    }
}

impl<'a> From<&'a RouteInfo> for RouteView<'a> {
    fn from(route: &'a RouteInfo) -> Self {
        Self {
            model: route.model.as_str(),
            hash: route.model.hash64(),
            kind: route.kind,
            urgency: route.urgency,
            payload_bytes: route.payload_bytes,
            exclude: None,
        }
    }
}

/// Whether every byte of `bytes` is visible ASCII other than space
/// (`!` ..= `~`, as [`u8::is_ascii_graphic`]), eight bytes at a time.
fn is_graphic(bytes: &[u8]) -> bool {
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

fn unrecognized(source: &'static str) -> InvalidRoute {
    InvalidRoute::new(source, InvalidReason::Unrecognized)
}

/// The single value of header `name` as UTF-8; more than one value is
/// ambiguous and rejected.
/// The route headers, in the order their checks run.
const ROUTE_HEADERS: [&str; 4] = [
    "x-model-id",
    "x-request-kind",
    "x-urgency",
    "content-length",
];
const MODEL: usize = 0;
const KIND: usize = 1;
const URGENCY: usize = 2;
const LENGTH: usize = 3;

/// The route headers of one request, found in one pass.
struct Found<'a> {
    values: [Option<&'a HeaderValue>; 4],
    duplicate: [bool; 4],
}

impl<'a> Found<'a> {
    fn scan(headers: &'a HeaderMap) -> Self {
        let mut found = Found {
            values: [None; 4],
            duplicate: [false; 4],
        };
        for (name, value) in headers {
            let i = match name.as_str() {
                "x-model-id" => MODEL,
                "x-request-kind" => KIND,
                "x-urgency" => URGENCY,
                "content-length" => LENGTH,
                _ => continue,
            };
            found.duplicate[i] |= found.values[i].replace(value).is_some();
        }
        found
    }

    /// The model ID and its hash when `x-model-id` is present once and
    /// holds a valid ID of visible ASCII; `None` for anything else (the
    /// full checks then name the header and the reason).
    fn plain_model(&self) -> Option<(&'a str, u64)> {
        if self.duplicate[MODEL] {
            return None;
        }
        let value = self.values[MODEL]?;
        let hash = ModelId::hash_visible(value.as_bytes())?;
        // Visible ASCII: `to_str` cannot fail.
        Some((value.to_str().ok()?, hash))
    }

    /// Header `i`'s bytes, if present once.
    fn bytes(&self, i: usize) -> Result<Option<&'a [u8]>, InvalidRoute> {
        if self.duplicate[i] {
            return Err(InvalidRoute::new(
                ROUTE_HEADERS[i],
                InvalidReason::Duplicate,
            ));
        }
        Ok(self.values[i].map(HeaderValue::as_bytes))
    }

    /// The error for header `i`, present once with a value that is no
    /// word it takes: not text, else unrecognized.
    #[cold]
    fn unknown(&self, i: usize) -> InvalidRoute {
        match self.text(i) {
            Err(error) => error,
            Ok(_) => unrecognized(ROUTE_HEADERS[i]),
        }
    }

    /// Header `i` as text, if present once.
    fn text(&self, i: usize) -> Result<Option<&'a str>, InvalidRoute> {
        let source = ROUTE_HEADERS[i];
        if self.duplicate[i] {
            return Err(InvalidRoute::new(source, InvalidReason::Duplicate));
        }
        // Visible ASCII in one simple pass; other UTF-8 is text too.
        self.values[i]
            .map(|value| {
                value
                    .to_str()
                    .or_else(|_| std::str::from_utf8(value.as_bytes()))
            })
            .transpose()
            .map_err(|_| InvalidRoute::new(source, InvalidReason::NotText))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Pair = (&'static str, &'static [u8]);

    fn headers(pairs: &[Pair]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(*k, http::HeaderValue::from_bytes(v).unwrap());
        }
        map
    }

    #[test]
    fn model_id_validation() {
        assert!(ModelId::new("llama-3.1-8b-instruct:lora/a").is_ok());
        assert!(ModelId::new("模型").is_ok());
        let reason = |s: &str| ModelId::new(s).unwrap_err().reason;
        assert_eq!(reason(""), InvalidReason::Empty);
        assert_eq!(reason("a b"), InvalidReason::ForbiddenCharacter);
        assert_eq!(reason("a\tb"), InvalidReason::ForbiddenCharacter);
        assert_eq!(reason("a\u{7f}"), InvalidReason::ForbiddenCharacter);
        assert_eq!(reason("a\u{a0}b"), InvalidReason::ForbiddenCharacter);
        assert!(ModelId::new(&"m".repeat(256)).is_ok());
        assert_eq!(reason(&"m".repeat(257)), InvalidReason::TooLong(256));
    }

    #[test]
    fn graphic_bytes_are_checked_eight_at_a_time() {
        for b in 0..=u8::MAX {
            for len in 1..=17 {
                for at in [0, len / 2, len - 1] {
                    let mut bytes = vec![b'm'; len];
                    bytes[at] = b;
                    assert_eq!(
                        is_graphic(&bytes),
                        b.is_ascii_graphic(),
                        "{b:#x} at {at} of {len}"
                    );
                }
            }
        }
        assert!(is_graphic(b""));
    }

    #[test]
    fn model_id_carries_xxh3() {
        let id = ModelId::new("resnet-50").unwrap();
        assert_eq!(id.hash64(), xxhash_rust::xxh3::xxh3_64(b"resnet-50"));
        assert_eq!(id, id.clone());
        assert_ne!(id, ModelId::new("resnet-51").unwrap());
    }

    #[test]
    fn defaults_when_only_model_given() {
        let route = RouteInfo::from_headers(&headers(&[("x-model-id", b"m")])).unwrap();
        assert_eq!(route, RouteInfo::new(ModelId::new("m").unwrap()));
    }

    #[test]
    fn reads_all_headers_any_case() {
        let route = RouteInfo::from_headers(&headers(&[
            ("x-model-id", b"m"),
            ("x-request-kind", b"UPDATE"),
            ("x-urgency", b"Critical"),
            ("content-length", b"42"),
        ]))
        .unwrap();
        assert_eq!(route.kind, RequestKind::Update);
        assert_eq!(route.urgency, Urgency::Critical);
        assert_eq!(route.payload_bytes, Some(42));
    }

    #[test]
    fn each_invalid_header_is_named() {
        let cases: &[(&[Pair], &str, InvalidReason)] = &[
            (&[], "x-model-id", InvalidReason::Missing),
            (&[("x-model-id", b"")], "x-model-id", InvalidReason::Empty),
            (
                &[("x-model-id", b"\xff\xfe")],
                "x-model-id",
                InvalidReason::NotText,
            ),
            (
                &[("x-model-id", b"a"), ("x-model-id", b"b")],
                "x-model-id",
                InvalidReason::Duplicate,
            ),
            (
                &[
                    ("x-model-id", b"m"),
                    ("content-length", b"1"),
                    ("content-length", b"1"),
                ],
                "content-length",
                InvalidReason::Duplicate,
            ),
            (
                &[("x-model-id", b"m"), ("x-request-kind", b"write")],
                "x-request-kind",
                InvalidReason::Unrecognized,
            ),
            (
                &[("x-model-id", b"m"), ("x-urgency", b"urgent")],
                "x-urgency",
                InvalidReason::Unrecognized,
            ),
            (
                &[("x-model-id", b"m"), ("content-length", b"-1")],
                "content-length",
                InvalidReason::Unrecognized,
            ),
        ];
        for (pairs, source, reason) in cases {
            let err = RouteInfo::from_headers(&headers(pairs)).unwrap_err();
            assert_eq!((err.source, err.reason), (*source, *reason), "{pairs:?}");
        }
    }

    #[test]
    fn extensions_take_precedence() {
        let route =
            RouteInfo::new(ModelId::new("from-ext").unwrap()).with_kind(RequestKind::Update);
        let req = Request::get("/")
            .header("x-model-id", "from-header")
            .extension(route.clone())
            .body(())
            .unwrap();
        assert_eq!(RouteInfo::from_request(&req).unwrap(), route);
    }
}
