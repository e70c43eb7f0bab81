//! A request's route, owned ([`RouteInfo`]) and borrowed ([`Route`]):
//! read from a request's headers (or a `RouteInfo` extension), the
//! borrowed one without allocating.

use std::sync::Arc;

use http::header::{HeaderMap, HeaderValue};
use http::{Extensions, Request};

use super::kind::{RequestKind, Urgency};
use super::model::ModelId;
use super::prefix::PrefixKey;
use crate::backend::extensions::Exclude;
use crate::route::error::{InvalidReason, InvalidRoute};

/// A request's route, borrowed from the request: what a
/// [`Routable`](super::Routable) request gives the balancer. Made from a
/// [`RouteInfo`] the request holds (`Route::from(&info)`); read from an
/// `http::Request`'s headers without allocating (the model ID borrowed
/// from its header, validated, with its hash). An owned [`RouteInfo`] or
/// [`ModelId`] is made only where one is kept (an error, a test).
#[derive(Debug, Clone, Copy)]
pub struct Route<'a> {
    pub(crate) model: &'a str,
    pub(crate) hash: u64,
    pub(crate) kind: RequestKind,
    pub(crate) urgency: Urgency,
    pub(crate) payload_bytes: Option<u64>,
    /// The prefix key, from a [`RouteInfo`] (never from a header).
    pub(crate) prefix: Option<PrefixKey>,
    /// A backend not to pick, from an [`Exclude`] extension (a hedge's
    /// backup).
    pub(crate) exclude: Option<&'a Exclude>,
}

/// The crate's name for [`Route`].
pub(crate) type RouteView<'a> = Route<'a>;

impl<'a> Route<'a> {
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
            prefix: None,
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
            prefix: self.prefix,
        }
    }

    /// What the balancer's ring and demand are keyed by: the prefix key's
    /// group if the route has one, else the model ID's hash.
    #[inline]
    pub(crate) fn affinity(&self) -> u64 {
        match self.prefix {
            Some(key) => key.group(),
            None => self.hash,
        }
    }
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
    /// [`ModelFromBodyBuilder::prefix_bytes`](crate::route::ModelFromBodyBuilder::prefix_bytes) or
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
    /// present, else its headers (see the [module docs](crate::route)).
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
            prefix: None,
        }
    }
}

impl<'a> From<&'a RouteInfo> for Route<'a> {
    fn from(route: &'a RouteInfo) -> Self {
        Self {
            model: route.model.as_str(),
            hash: route.model.hash64(),
            kind: route.kind,
            urgency: route.urgency,
            payload_bytes: route.payload_bytes,
            prefix: route.prefix,
            exclude: None,
        }
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
