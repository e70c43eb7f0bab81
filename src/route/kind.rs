//! [`RequestKind`], [`Urgency`] and [`SendOnce`]: what a request does, how
//! much its caller cares about latency, and whether it may be sent twice.

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

/// A request extension: send this request at most once. A request that
/// carries it is never hedged, and the hedge's retry policy
/// (`hedge::RetryPolicy`) retries it only when its
/// connection was refused (the request never left); its route is read
/// and it is balanced as any other.
///
/// Inference is safe to send twice: a hedge races two copies and drops
/// the loser. A request that changes state on the server is not — a
/// Responses API call that stores its answer (`store`, which defaults to
/// true there) or runs in the background would be done, stored and
/// billed twice. Whoever knows the request's meaning (a route layer, the
/// gateway) puts this marker in its extensions before the hedge:
///
/// ```
/// use tower_model_balance::route::SendOnce;
///
/// let mut req = http::Request::post("/v1/responses").body(()).unwrap();
/// req.extensions_mut().insert(SendOnce);
/// assert!(req.extensions().get::<SendOnce>().is_some());
/// ```
///
/// Updates ([`RequestKind::Update`]) are never hedged either, and are
/// routed by load; `SendOnce` keeps a request's own kind and routing.
/// A request type of your own that the hedge must not copy returns
/// `None` from `CloneRequest::clone_request` instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SendOnce;

impl SendOnce {
    /// Whether `extensions` hold the marker.
    #[cfg_attr(not(feature = "hedge"), allow(dead_code))]
    pub(crate) fn is_marked(extensions: &http::Extensions) -> bool {
        extensions.get::<Self>().is_some()
    }
}
