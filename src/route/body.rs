//! The model ID from an OpenAI-style JSON body or a KServe v2 path.
//!
//! ```
//! use bytes::Bytes;
//! use http_body_util::{BodyExt, Either, Full};
//! use tower::{service_fn, Layer, ServiceExt};
//! use tower_model_balance::error::{BoxError, PayloadTooLarge};
//! use tower_model_balance::route::{ModelFromBodyLayer, RouteInfo};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), BoxError> {
//! // The inner service echoes the model of the RouteInfo it sees.
//! let echo = service_fn(|req: http::Request<Either<Full<Bytes>, Full<Bytes>>>| async move {
//!     let route = req.extensions().get::<RouteInfo>().cloned();
//!     Ok::<_, BoxError>(route.map(|r| r.model.to_string()))
//! });
//! let layer = ModelFromBodyLayer::builder().limit(256).build()?;
//! let svc = layer.layer(echo);
//!
//! // OpenAI-compatible: the model is the body's top-level "model" field.
//! let body = r#"{"model": "llama-3-8b", "messages": [{"role": "user", "content": "hi"}]}"#;
//! let req = http::Request::post("/v1/chat/completions").body(Full::new(Bytes::from(body)))?;
//! assert_eq!(svc.clone().oneshot(req).await?.as_deref(), Some("llama-3-8b"));
//!
//! // KServe v2: the model is in the path; the body is not read.
//! let req = http::Request::post("/v2/models/resnet-50/versions/2/infer")
//!     .body(Full::new(Bytes::from("not even JSON")))?;
//! assert_eq!(svc.clone().oneshot(req).await?.as_deref(), Some("resnet-50"));
//!
//! // A body over the limit (256 bytes here) is refused: a gateway answers 413.
//! let big = format!(r#"{{"model": "m", "prompt": "{}"}}"#, "x".repeat(300));
//! let req = http::Request::post("/v1/completions").body(Full::new(Bytes::from(big)))?;
//! let err = svc.oneshot(req).await.unwrap_err();
//! assert_eq!(err.downcast_ref::<PayloadTooLarge>(), Some(&PayloadTooLarge::new(256)));
//! # Ok(()) }
//! ```
//!
//! Most inference APIs carry the model in the request, not in a header: the
//! OpenAI-compatible ones in the JSON body, KServe v2 / Triton in the path.
//! [`ModelFromBody`] finds it there once, ahead of the balancer, and stores
//! a [`RouteInfo`] in the request's extensions, where every later layer
//! reads it. Only the top-level `"model"` is kept: the rest of the body is
//! skimmed, not parsed into a tree, and the bytes go on unchanged. The
//! inner service takes `Request<Either<B, Full<Bytes>>>`: `Left` is the
//! original body, unread; `Right` the buffered one.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http::Request;
use http_body::Body;
use http_body_util::{BodyExt, Either, Full, LengthLimitError, Limited};
use tower_layer::Layer;
use tower_service::Service;

use self::parse::{decode_segment, kserve_v2_model, model_from_json};
use super::{ModelId, RouteInfo, Traits, MODEL_ID_HEADER};
use crate::error::{BoxError, InvalidConfig, InvalidReason, InvalidRoute, PayloadTooLarge};

/// Default body limit: 1 MiB.
const DEFAULT_LIMIT: usize = 1024 * 1024;
/// Largest accepted body limit: 64 MiB.
const MAX_LIMIT: usize = 64 * 1024 * 1024;

/// Wraps a service in [`ModelFromBody`]. Build one with
/// [`ModelFromBodyLayer::builder`], or take the default (1 MiB limit).
#[derive(Debug, Clone, Copy)]
pub struct ModelFromBodyLayer {
    limit: usize,
}

impl ModelFromBodyLayer {
    /// A layer with the default body limit of 1 MiB.
    pub const fn new() -> Self {
        Self {
            limit: DEFAULT_LIMIT,
        }
    }

    /// A builder for a layer with another body limit.
    pub const fn builder() -> ModelFromBodyBuilder {
        ModelFromBodyBuilder {
            limit: DEFAULT_LIMIT,
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
        }
    }
}

/// Builds a [`ModelFromBodyLayer`], checking its values.
#[derive(Debug, Clone, Copy)]
pub struct ModelFromBodyBuilder {
    limit: usize,
}

impl ModelFromBodyBuilder {
    /// The most body bytes buffered to find the model ID; a longer body is a
    /// [`PayloadTooLarge`] error. Bytes, 1 to 64 MiB; default 1 MiB.
    pub const fn limit(mut self, bytes: usize) -> Self {
        self.limit = bytes;
        self
    }

    /// The layer.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming `limit` when it is 0 or over 64 MiB.
    pub fn build(self) -> Result<ModelFromBodyLayer, InvalidConfig> {
        if self.limit == 0 || self.limit > MAX_LIMIT {
            return Err(InvalidConfig::new("limit", "1 to 67108864 bytes (64 MiB)"));
        }
        Ok(ModelFromBodyLayer { limit: self.limit })
    }
}

/// Finds a request's model ID where inference APIs carry it and stores a
/// [`RouteInfo`] in the request's extensions, for the balancer behind.
///
/// In order:
///
/// 1. A request with a `RouteInfo` extension or an `x-model-id` header goes
///    through untouched, body unread (as `Either::Left`).
/// 2. A KServe v2 path, `/v2/models/{name}/infer` or
///    `/v2/models/{name}/versions/{version}/infer`: the model ID is `{name}`
///    percent-decoded (`a%2Fb` is `a/b`, as the same model named in a JSON
///    body; invalid UTF-8 once decoded is [`InvalidReason::NotText`], a
///    decoded control character an invalid ID); the body is not read
///    (`Either::Left`).
/// 3. Otherwise the body is buffered, up to the limit, and the top-level
///    `"model"` string of the JSON object is the model ID; no other field is
///    parsed into memory. The inner service gets every byte of the body, in
///    one chunk (`Either::Right`).
///
/// Kind, urgency and size come from `x-request-kind`, `x-urgency` and
/// `content-length` as in [`RouteInfo::from_headers`]; a buffered body
/// without `content-length` has its size taken from the bytes read.
///
/// # Errors
///
/// The error type is [`BoxError`], holding:
///
/// * [`PayloadTooLarge`] when the body is over the limit;
/// * [`InvalidRoute`] with source `body` when the body is not a JSON object
///   ([`InvalidReason::NotJson`]), has no `model` or a `null` one
///   (`Missing`), a `model` that is not a string (`Unrecognized`) or more
///   than once (`Duplicate`), or an invalid model ID; with source `path` for
///   an invalid name in the KServe v2 path; with the header's name for an
///   invalid `x-request-kind`, `x-urgency` or `content-length`;
/// * [`InvalidRoute`] from `body`, reason [`InvalidReason::Unreadable`], when
///   reading the body fails (the client broke it off: its error, not a
///   backend's; the body's own error is logged at debug level);
/// * the inner service's error, boxed.
///
/// # Backpressure
///
/// `poll_ready` is the inner service's. The response future is boxed (a
/// body being buffered is allocated anyway); while it buffers, it holds the
/// inner service that was made ready, and a clone takes its place.
#[derive(Debug, Clone)]
pub struct ModelFromBody<S> {
    inner: S,
    limit: usize,
}

impl<S> ModelFromBody<S> {
    /// Wraps `inner` with the default body limit of 1 MiB.
    pub const fn new(inner: S) -> Self {
        Self {
            inner,
            limit: DEFAULT_LIMIT,
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

impl<S, B> Service<Request<B>> for ModelFromBody<S>
where
    S: Service<Request<Either<B, Full<Bytes>>>> + Clone + Send + 'static,
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
        let has_route = req.extensions().get::<RouteInfo>().is_some()
            || req.headers().contains_key(MODEL_ID_HEADER);
        if has_route {
            return forward(&mut self.inner, req.map(Either::Left));
        }
        let traits = match Traits::from_headers(req.headers()) {
            Ok(traits) => traits,
            Err(err) => return failed(err.into()),
        };
        if let Some(name) = kserve_v2_model(req.uri().path()) {
            let name = match name.and_then(decode_segment) {
                Ok(name) => name,
                Err(err) => return failed(err.into()),
            };
            return match ModelId::from_source("path", &name) {
                Ok(model) => {
                    let mut req = req.map(Either::Left);
                    req.extensions_mut().insert(traits.route(model));
                    forward(&mut self.inner, req)
                }
                Err(err) => failed(err.into()),
            };
        }
        // Take the service that is ready; its clone waits for the next
        // `poll_ready`.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let limit = self.limit;
        ResponseFuture {
            inner: Box::pin(async move {
                let (mut parts, body) = req.into_parts();
                let bytes = match Limited::new(body, limit).collect().await {
                    Ok(collected) => collected.to_bytes(),
                    Err(err) if err.is::<LengthLimitError>() => {
                        return Err(PayloadTooLarge::new(limit).into())
                    }
                    Err(err) => {
                        tracing::debug!(%err, "request body not read");
                        return Err(InvalidRoute::new("body", InvalidReason::Unreadable).into());
                    }
                };
                let model = model_from_json(&bytes)?;
                let mut route = traits.route(model);
                if route.payload_bytes.is_none() {
                    route.payload_bytes = u64::try_from(bytes.remaining()).ok();
                }
                parts.extensions.insert(route);
                let req = Request::from_parts(parts, Either::Right(Full::new(bytes)));
                inner.call(req).await.map_err(Into::into)
            }),
        }
    }
}

fn forward<S, R>(inner: &mut S, req: R) -> ResponseFuture<S::Response>
where
    S: Service<R>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    let fut = inner.call(req);
    ResponseFuture {
        inner: Box::pin(async move { fut.await.map_err(Into::into) }),
    }
}

fn failed<T>(err: BoxError) -> ResponseFuture<T> {
    ResponseFuture {
        inner: Box::pin(async move { Err(err) }),
    }
}

mod parse;
#[cfg(test)]
mod tests;
