//! Requests the hedge can send twice, and a backup waiting to be sent.

use http::{Extensions, HeaderMap};
use tokio::time::Instant;

use crate::backend::PickedSlot;
use crate::route::{Route, RouteInfo};

/// A request that can be copied for a backup attempt.
///
/// Implemented for `http::Request<B>` with a `Clone` body (for example
/// `http_body_util::Full<Bytes>`, `Empty`, `String`, `()`). A body that is
/// not `Clone` — tonic's `tonic::body::Body`, hyper's `Incoming`, a
/// stream — is read whole into a `Full<Bytes>` first by
/// [`BufferRequestBodyLayer`](super::BufferRequestBodyLayer) above the
/// hedge (or by `route::ModelFromBodyLayer`, which does so while it reads
/// the model); the orphan rule keeps you from implementing this trait for
/// `http::Request<tonic::body::Body>` yourself. A request whose
/// [`clone_request`](Self::clone_request) returns `None` is sent once,
/// without error. Implement it for your own request type; the provided
/// methods give the hedge the request's route (from its extensions or
/// headers, as the balancer reads it) and a place for the
/// [`PickedSlot`](crate::backend::PickedSlot) and
/// [`Exclude`](crate::backend::Exclude) extensions — without them, every
/// request is timed in one shared histogram and the backup may go to the
/// same backend.
#[diagnostic::on_unimplemented(
    message = "the hedge cannot copy a `{Self}` for a backup attempt",
    label = "not a request the hedge can copy",
    note = "`http::Request<B>` is one when `B: Clone`: put `tower_model_balance::hedge::BufferRequestBodyLayer::new(limit_bytes)` above the hedge to read a body that is not (tonic's `Body`, hyper's `Incoming`, a stream) into `http_body_util::Full<Bytes>`, and map it back below the hedge if the service needs its own body type (`ServiceBuilder::map_request(|r: http::Request<Full<Bytes>>| r.map(tonic::body::Body::new))`)",
    note = "for a request type of your own, implement `tower_model_balance::hedge::CloneRequest`"
)]
pub trait CloneRequest: Sized {
    /// A copy of the request, or `None` when it cannot be copied.
    fn clone_request(&self) -> Option<Self>;

    /// The request's extensions, if it has any (default: none).
    fn extensions(&self) -> Option<&Extensions> {
        None
    }

    /// The request's extensions, mutably (default: none).
    fn extensions_mut(&mut self) -> Option<&mut Extensions> {
        None
    }

    /// The request's headers, if it has any (default: none).
    fn headers(&self) -> Option<&HeaderMap> {
        None
    }

    /// The request's route, which picks the model's own latency window and
    /// tells an update (never hedged) from an inference. The default reads
    /// it as the balancer does, from a `RouteInfo` in the
    /// [extensions](Self::extensions) or else the [headers](Self::headers);
    /// `None` (no route, or an invalid one) times the request in the
    /// shared window. A request of another protocol returns
    /// `Some(Route::from(&its_route_info))`.
    fn route(&self) -> Option<Route<'_>> {
        match (self.extensions(), self.headers()) {
            (Some(extensions), Some(headers)) => Route::from_parts(extensions, headers).ok(),
            (None, Some(headers)) => Route::from_headers(headers).ok(),
            (Some(extensions), None) => extensions.get::<RouteInfo>().map(Route::from),
            (None, None) => None,
        }
    }
}

impl<B: Clone> CloneRequest for http::Request<B> {
    fn clone_request(&self) -> Option<Self> {
        Some(self.clone())
    }

    fn extensions(&self) -> Option<&Extensions> {
        Some(http::Request::extensions(self))
    }

    fn extensions_mut(&mut self) -> Option<&mut Extensions> {
        Some(http::Request::extensions_mut(self))
    }

    fn headers(&self) -> Option<&HeaderMap> {
        Some(http::Request::headers(self))
    }
}

/// A backup not yet sent: the inner service's clone (not yet polled
/// ready), the request's copy, the first attempt's slot, when to send.
pub(crate) struct Backup<S, Req> {
    pub(crate) service: S,
    pub(crate) request: Req,
    pub(crate) slot: Option<PickedSlot>,
    pub(crate) deadline: Instant,
    /// The first attempt failed before the backup went: the backup is a
    /// retry, and avoids that backend whenever another is eligible
    /// ([`Exclude::strict`](crate::backend::Exclude::strict)).
    pub(crate) after_failure: bool,
}
