//! A request's route, owned ([`RouteInfo`]) and borrowed ([`Route`]):
//! read from a request's headers (or a `RouteInfo` extension), the
//! borrowed one without allocating.

use std::sync::Arc;

use http::header::HeaderMap;
use http::{Extensions, Request};

use super::header::{Found, Traits, MODEL};
use super::kind::{RequestKind, Urgency};
use super::model::ModelId;
use super::prefix::PrefixKey;
use crate::route::error::{InvalidReason, InvalidRoute};

/// A request's route, borrowed from the request: what a
/// [`Routable`](super::Routable) request gives the balancer. Made from the
/// request's own model name ([`Route::new`]`(&self.model)`, then
/// [`with_kind`](Route::with_kind), [`with_urgency`](Route::with_urgency),
/// [`with_payload_bytes`](Route::with_payload_bytes),
/// [`with_prefix`](Route::with_prefix)) or from a [`RouteInfo`] it holds
/// (`Route::from(&info)`); read from an `http::Request`'s headers without
/// allocating (the model ID borrowed from its header, validated, with its
/// hash). An owned [`RouteInfo`] or [`ModelId`] is made only where one is
/// kept (an error, a test).
#[derive(Debug, Clone, Copy)]
pub struct Route<'a> {
    pub(crate) model: &'a str,
    pub(crate) hash: u64,
    pub(crate) kind: RequestKind,
    pub(crate) urgency: Urgency,
    pub(crate) payload_bytes: Option<u64>,
    /// The prefix key, from a [`RouteInfo`] (never from a header).
    pub(crate) prefix: Option<PrefixKey>,
    /// The request's extensions, when it has any: where the balancer
    /// reads a backend not to pick (`backend::Exclude`, a hedge's backup
    /// or a retry; `backend` sits above this module).
    pub(crate) extensions: Option<&'a Extensions>,
}

/// The crate's name for [`Route`].
pub(crate) type RouteView<'a> = Route<'a>;

impl<'a> Route<'a> {
    /// The route of a request for `model`, borrowed from the request: an
    /// inference of normal urgency and unknown size, with no prefix key
    /// (set them with the `with_*` methods). `model` is checked as
    /// [`ModelId::new`] checks it and hashed the same way (xxh3, seed 0),
    /// so a request routed by its `&str` goes to the same owners as one
    /// with that `x-model-id` header or [`RouteInfo`]. Allocates nothing.
    ///
    /// ```
    /// use tower_model_balance::route::{RequestKind, Route, Urgency};
    ///
    /// let model = String::from("llama-3-8b");
    /// let _route = Route::new(&model)?
    ///     .with_kind(RequestKind::Update)
    ///     .with_urgency(Urgency::High)
    ///     .with_payload_bytes(1024);
    ///
    /// let err = Route::new("two words").unwrap_err();
    /// assert_eq!(err.source, "model");
    /// assert_eq!(err.to_string(), "invalid route: `model`: holds whitespace or a control character");
    /// # Ok::<(), tower_model_balance::error::InvalidRoute>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`InvalidRoute`] with source `model` when `model` is empty, longer
    /// than [`ModelId::MAX_LEN`] bytes, or holds whitespace or a control
    /// character; the balancer fails such a request with it.
    #[inline]
    pub fn new(model: &'a str) -> Result<Self, InvalidRoute> {
        let hash = ModelId::validate("model", model)?;
        Ok(Self {
            model,
            hash,
            kind: RequestKind::default(),
            urgency: Urgency::default(),
            payload_bytes: None,
            prefix: None,
            extensions: None,
        })
    }

    /// Sets the request kind (default [`RequestKind::Inference`]).
    #[must_use]
    pub fn with_kind(mut self, kind: RequestKind) -> Self {
        self.kind = kind;
        self
    }

    /// Sets the urgency (default [`Urgency::Normal`]).
    #[must_use]
    pub fn with_urgency(mut self, urgency: Urgency) -> Self {
        self.urgency = urgency;
        self
    }

    /// Sets the payload size in bytes (default unknown).
    #[must_use]
    pub fn with_payload_bytes(mut self, bytes: u64) -> Self {
        self.payload_bytes = Some(bytes);
        self
    }

    /// Sets the prefix key (default none): the balancer routes the request
    /// by its group (and session) in place of the model ID.
    #[must_use]
    pub fn with_prefix(mut self, key: PrefixKey) -> Self {
        self.prefix = Some(key);
        self
    }

    /// As [`RouteInfo::from_parts`], borrowing; keeps the extensions for
    /// the balancer's exclusion.
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
        view.extensions = Some(extensions);
        Ok(view)
    }

    /// As [`RouteInfo::from_headers`], borrowing. One pass over the
    /// headers (cheaper than four hashed lookups for the few headers a
    /// request carries), then the checks in a fixed order: model ID, kind,
    /// urgency, size. Out of line: the scan and the checks inline into it
    /// here, in this crate, rather than each be a call from the caller's.
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
            extensions: None,
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
    /// by hand, never read from a header.
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

    /// Sets the request kind (the crate's tests; users set the field).
    #[cfg(test)]
    pub(crate) fn with_kind(mut self, kind: RequestKind) -> Self {
        self.kind = kind;
        self
    }

    /// Sets the urgency (the crate's tests).
    #[cfg(test)]
    pub(crate) fn with_urgency(mut self, urgency: Urgency) -> Self {
        self.urgency = urgency;
        self
    }

    /// Sets the payload size in bytes (the crate's tests).
    #[cfg(test)]
    pub(crate) fn with_payload_bytes(mut self, bytes: u64) -> Self {
        self.payload_bytes = Some(bytes);
        self
    }

    /// Sets the prefix key (the crate's tests).
    #[cfg(test)]
    pub(crate) fn with_prefix(mut self, key: PrefixKey) -> Self {
        self.prefix = Some(key);
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

// The header's traits and a model found elsewhere, as one route (here,
// beside `RouteInfo`, so that `header.rs` does not import this file).
impl Traits {
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
            extensions: None,
        }
    }
}
