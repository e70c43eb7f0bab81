//! The model ID from an OpenAI-style JSON body or a KServe v2 path.
//!
//! ```
//! use bytes::Bytes;
//! use http_body_util::Full;
//! use tower::{service_fn, Layer, ServiceExt};
//! use tower_model_balance::error::{BoxError, PayloadTooLarge};
//! use tower_model_balance::route::{ModelFromBodyLayer, RouteInfo};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), BoxError> {
//! // The inner service echoes the model of the RouteInfo it sees.
//! let echo = service_fn(|req: http::Request<Full<Bytes>>| async move {
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
//! // KServe v2: the model is in the path; the body is not parsed.
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
//! a [`RouteInfo`](crate::route::RouteInfo) in the request's extensions, where every later layer
//! reads it. Only the top-level `"model"` is kept: the rest of the body is
//! skimmed, not parsed into a tree, and the bytes go on unchanged. The
//! inner service takes `Request<Full<Bytes>>` whatever the request (every
//! body is read under the limit, so a hedge behind can send it twice; see
//! [`ModelFromBody`] for why).
//!
//! At a trust boundary, where clients could name any model in a header,
//! turn on [`strip_routing_headers`](ModelFromBodyBuilder::strip_routing_headers):
//! the client's `x-model-id`, `x-request-kind` and `x-urgency` are then
//! ignored and removed.

pub(crate) mod builder;
mod defaults;
mod key;
mod parse;
mod prompt;
pub(super) mod service;

pub use self::builder::{ModelFromBodyBuilder, ModelFromBodyLayer};
pub use self::service::ModelFromBody;
#[cfg(test)]
mod tests;
