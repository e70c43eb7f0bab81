//! The route headers: their names, and everything in a route but the
//! model ID ([`Traits`]) read from them in one pass over a request's
//! headers ([`Found`]).

use http::header::{HeaderMap, HeaderName, HeaderValue};

use super::kind::{RequestKind, Urgency};
use super::model::ModelId;
use crate::route::error::{InvalidReason, InvalidRoute};

/// Header carrying the model ID.
pub const MODEL_ID_HEADER: HeaderName = HeaderName::from_static("x-model-id");
/// Header carrying the request kind (`inference` or `update`).
pub const REQUEST_KIND_HEADER: HeaderName = HeaderName::from_static("x-request-kind");
/// Header carrying the urgency (`normal`, `high` or `critical`).
pub const URGENCY_HEADER: HeaderName = HeaderName::from_static("x-urgency");

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
    #[inline]
    pub(super) fn from_found(found: &Found<'_>) -> Result<Self, InvalidRoute> {
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
}

fn unrecognized(source: &'static str) -> InvalidRoute {
    InvalidRoute::new(source, InvalidReason::Unrecognized)
}

/// The route headers, in the order their checks run.
const ROUTE_HEADERS: [&str; 4] = [
    "x-model-id",
    "x-request-kind",
    "x-urgency",
    "content-length",
];
pub(super) const MODEL: usize = 0;
const KIND: usize = 1;
const URGENCY: usize = 2;
const LENGTH: usize = 3;

/// The route headers of one request, found in one pass.
pub(super) struct Found<'a> {
    values: [Option<&'a HeaderValue>; 4],
    duplicate: [bool; 4],
}

impl<'a> Found<'a> {
    #[inline]
    pub(super) fn scan(headers: &'a HeaderMap) -> Self {
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
    #[inline]
    pub(super) fn plain_model(&self) -> Option<(&'a str, u64)> {
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
    pub(super) fn text(&self, i: usize) -> Result<Option<&'a str>, InvalidRoute> {
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
