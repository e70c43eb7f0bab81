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

#[cfg(doc)]
use self::error::InvalidRoute;

#[cfg(feature = "body")]
pub(crate) mod body;
#[cfg(feature = "body")]
#[cfg_attr(docsrs, doc(cfg(feature = "body")))]
pub mod future;
#[cfg(feature = "body")]
#[cfg_attr(docsrs, doc(cfg(feature = "body")))]
pub use body::{ModelFromBody, ModelFromBodyBuilder, ModelFromBodyLayer};
pub(crate) mod error;
mod header;
mod kind;
mod model;
mod prefix;
mod routable;
#[cfg(test)]
mod tests;
mod view;

pub use self::header::{MODEL_ID_HEADER, REQUEST_KIND_HEADER, URGENCY_HEADER};
pub use self::kind::{RequestKind, SendOnce, Urgency};
pub use self::model::ModelId;
pub use self::prefix::PrefixKey;
pub use self::routable::Routable;
#[cfg(feature = "balance")]
pub(crate) use self::view::RouteView;
pub use self::view::{Route, RouteInfo};
