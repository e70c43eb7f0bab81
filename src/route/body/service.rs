//! [`ModelFromBody`]: the service that finds a request's model ID in its
//! body or path and stores its route in its extensions.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http::Request;
use http_body::Body;
use http_body_util::Full;
use tower_service::Service;

use super::defaults::{DefaultModel, DEFAULT_LIMIT};
use super::key::{session_id, with_prefix, PrefixSource};
use super::parse::{decode_segment, kserve_v2_model, read_json};
use super::prompt::Prompt;
use crate::buffer::{ReadWhole, Unread};
use crate::error::common::BoxError;
use crate::route::error::{InvalidReason, InvalidRoute};
use crate::route::header::Traits;
use crate::route::header::{MODEL_ID_HEADER, REQUEST_KIND_HEADER, URGENCY_HEADER};
use crate::route::model::ModelId;
use crate::route::view::RouteInfo;

/// Finds a request's model ID where inference APIs carry it, stores a
/// [`RouteInfo`] in the request's extensions for the balancer behind, and
/// hands the body on read whole, as `Full<Bytes>`.
///
/// In order:
///
/// 1. With [`strip_routing_headers`](super::ModelFromBodyBuilder::strip_routing_headers)
///    on, `x-model-id`, `x-request-kind` and `x-urgency` are removed.
/// 2. A request with a `RouteInfo` extension or an `x-model-id` header
///    keeps the route it has: no extension is added, the body is not
///    parsed.
/// 3. A KServe v2 path, `/v2/models/{name}/infer` or
///    `/v2/models/{name}/versions/{version}/infer`: the model ID is `{name}`
///    percent-decoded (`a%2Fb` is `a/b`, as the same model named in a JSON
///    body; invalid UTF-8 once decoded is [`InvalidReason::NotText`], a
///    decoded control character an invalid ID); the body is not parsed.
/// 4. Otherwise the top-level `"model"` string of the JSON object in the
///    body is the model ID; no other field is parsed into memory.
///
/// Kind, urgency and size come from `x-request-kind`, `x-urgency` and
/// `content-length` as in [`RouteInfo::from_headers`]; without
/// `content-length`, the size is the bytes read.
///
/// # One body type, buffered
///
/// Every body is read, up to the limit, and handed on as
/// `Request<Full<Bytes>>`, whichever step found the route: the inner stack
/// has one body type whatever the request, and it is `Clone`, so a
/// hedge (feature `hedge`) or a retry behind can send the request again with
/// no buffering of its own (a clone shares the bytes). A JSON body must be
/// read to find the model anyway; a body routed by its path or header is
/// read too, not parsed, under the same limit — so it is bounded in memory,
/// and a client that breaks it off fails here as the client's error,
/// before a backend is chosen, never as that backend's failure. The cost:
/// such a body does not stream through. A route that must stream large
/// bodies (and has no hedge or retry) leaves this layer out and routes by
/// header or by a `RouteInfo` it inserts itself: the balancer reads the
/// route from either, with any body type.
///
/// # Errors
///
/// The error type is [`BoxError`], holding:
///
/// * [`PayloadTooLarge`](crate::error::PayloadTooLarge) when the body is over the limit;
/// * [`InvalidRoute`] with source `body` when the body is not a JSON object
///   ([`InvalidReason::NotJson`]; [`MalformedJson`](InvalidReason::MalformedJson)
///   with the line and column of a syntax error,
///   [`TruncatedJson`](InvalidReason::TruncatedJson) for a body cut short),
///   has no `model` or a `null` one (`Missing`, unless a
///   [`default_model`](super::ModelFromBodyBuilder::default_model) names one), a `model` that is not a string (`Unrecognized`) or more
///   than once (`Duplicate`), or an invalid model ID; with source `path` for
///   an invalid name in the KServe v2 path; with the header's name for an
///   invalid `x-request-kind`, `x-urgency` or `content-length` (checked
///   before the body is read);
/// * [`InvalidRoute`] from `body`, reason [`InvalidReason::Unreadable`], when
///   reading the body fails (the client broke it off: its error, not a
///   backend's; the body's own error is logged at debug level);
/// * the inner service's error, boxed.
///
/// # Requirements
///
/// | | |
/// |---|---|
/// | request | `http::Request<B>`, `B: http_body::Body + Send + 'static`, `B::Error: Into<BoxError>` |
/// | inner service `S` | `Service<Request<Full<Bytes>>> + Clone + Send + 'static`, `S::Future: Send` |
/// | error | `S::Error: Into<BoxError>` |
/// | hands on | `Request<Full<Bytes>>` (cloneable: a hedge behind can copy it), its `RouteInfo` in the extensions |
///
/// # Backpressure
///
/// `poll_ready` is the inner service's. The response future is boxed (a
/// body being buffered is allocated anyway); while it buffers, it holds the
/// inner service that was made ready, and a clone takes its place. It
/// keeps no readiness of its own: a `call` without `poll_ready` is
/// forwarded, and the inner service's contract applies (the crate's
/// [readiness contract](crate#readiness)).
#[derive(Debug, Clone)]
pub struct ModelFromBody<S> {
    pub(super) inner: S,
    pub(super) limit: usize,
    pub(super) strip_routing_headers: bool,
    pub(super) prefix: PrefixSource,
    pub(super) default_model: DefaultModel,
}

impl<S> ModelFromBody<S> {
    /// Wraps `inner` with the default body limit of 1 MiB.
    pub const fn new(inner: S) -> Self {
        Self {
            inner,
            limit: DEFAULT_LIMIT,
            strip_routing_headers: false,
            prefix: PrefixSource::OFF,
            default_model: DefaultModel::NONE,
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

/// The response future of [`ModelFromBody`]: a boxed future, since a body
/// being buffered is allocated anyway.
pub struct ResponseFuture<T> {
    inner: Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>,
}

impl<T> fmt::Debug for ResponseFuture<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<T> Future for ResponseFuture<T> {
    type Output = Result<T, BoxError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

/// Where a request's route comes from, known before its body is read.
enum Found {
    /// It has one already (an extension, or a trusted `x-model-id` with
    /// no prefix key to read).
    Given,
    /// A trusted `x-model-id` names the model; the prefix key is read.
    Header(RouteInfo),
    /// The KServe v2 path named the model.
    Path(RouteInfo),
    /// The JSON body names the model; kind, urgency and size as read.
    Body(Traits),
}

impl<S, B> Service<Request<B>> for ModelFromBody<S>
where
    S: Service<Request<Full<Bytes>>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let (mut parts, body) = req.into_parts();
        if self.strip_routing_headers {
            for name in [MODEL_ID_HEADER, REQUEST_KIND_HEADER, URGENCY_HEADER] {
                parts.headers.remove(name);
            }
        }
        let found = match find(&parts, self.prefix.is_on()) {
            Ok(found) => found,
            Err(err) => return failed(err.into()),
        };
        let session = match session_id(&parts.headers, self.prefix.session.as_ref()) {
            Ok(session) => session,
            Err(err) => return failed(err.into()),
        };
        let prefix_bytes = self.prefix.bytes;
        let has_session = self.prefix.session.is_some();
        // Take the service that is ready; its clone waits for the next
        // `poll_ready`.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let limit = self.limit;
        let default_model = self.default_model.clone();
        ResponseFuture {
            inner: Box::pin(async move {
                let bytes = match ReadWhole::new(body, limit).await {
                    Ok(bytes) => bytes,
                    Err(Unread::TooLarge(err)) => return Err(err.into()),
                    Err(Unread::Body(err)) => {
                        tracing::debug!(%err, "request body not read");
                        return Err(InvalidRoute::new("body", InvalidReason::Unreadable).into());
                    }
                };
                // With a session header alone, one byte says whether the
                // body has a prompt at all.
                let capture = match (prefix_bytes, has_session) {
                    (0, false) => 0,
                    (0, true) => 1,
                    (n, _) => n,
                };
                let mut prompt = (capture > 0).then(|| Prompt::new(capture));
                let route = match found {
                    Found::Given => None,
                    Found::Path(route) => {
                        // No prompt: no key (a session alone would let a
                        // client choose a model's backends).
                        prompt = None;
                        Some(route)
                    }
                    Found::Header(route) => {
                        // The model is known: the body is read for its
                        // prompt only, and one not JSON gives none.
                        if read_json(&bytes, prompt.as_mut()).is_err_and(|e| e.reason.is_json()) {
                            prompt = None;
                        }
                        Some(route)
                    }
                    Found::Body(traits) => {
                        let read = match read_json(&bytes, prompt.as_mut()) {
                            // The prompt is a hint: a body the capture
                            // cannot read (a string that is not UTF-8, a
                            // lone surrogate escape) is read for its model
                            // alone, and goes on to the server to judge.
                            Err(e) if prompt.is_some() && e.reason.is_json() => {
                                prompt = None;
                                read_json(&bytes, None)
                            }
                            read => read,
                        };
                        let model = match read {
                            // No model named: the fleet's only one, if
                            // the layer was given a way to know it.
                            Err(e) if e.reason == InvalidReason::Missing => {
                                default_model.get().ok_or(e)?
                            }
                            read => read?,
                        };
                        Some(traits.route(model))
                    }
                };
                let route = route
                    .map(|route| with_prefix(route, prompt, prefix_bytes > 0, session.as_ref()));
                if let Some(mut route) = route {
                    if route.payload_bytes.is_none() {
                        route.payload_bytes = u64::try_from(bytes.remaining()).ok();
                    }
                    parts.extensions.insert(route);
                }
                let req = Request::from_parts(parts, Full::new(bytes));
                inner.call(req).await.map_err(Into::into)
            }),
        }
    }
}

/// Where the route of a request with these parts comes from; `prefix`:
/// a prefix key is to be read.
fn find(parts: &http::request::Parts, prefix: bool) -> Result<Found, InvalidRoute> {
    if parts.extensions.get::<RouteInfo>().is_some() {
        return Ok(Found::Given);
    }
    if parts.headers.contains_key(MODEL_ID_HEADER) {
        return match prefix {
            true => RouteInfo::from_headers(&parts.headers).map(Found::Header),
            false => Ok(Found::Given),
        };
    }
    let traits = Traits::from_headers(&parts.headers)?;
    match kserve_v2_model(parts.uri.path()) {
        Some(name) => {
            let name = name.and_then(decode_segment)?;
            let model = ModelId::from_source("path", &name)?;
            Ok(Found::Path(traits.route(model)))
        }
        None => Ok(Found::Body(traits)),
    }
}

fn failed<T>(err: BoxError) -> ResponseFuture<T> {
    ResponseFuture {
        inner: Box::pin(async move { Err(err) }),
    }
}
