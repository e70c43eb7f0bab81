//! When the breaker and the balancer record a call's outcome: at the end
//! of its response body, or when its response arrives.

/// Records a call's outcome **at the end of its response body** (the
/// default of [`CircuitBreaker`](crate::breaker::CircuitBreaker) and
/// [`ModelBalancer`](crate::balance::ModelBalancer)): for an
/// `http::Response<B>` whose `B: http_body::Body`, streamed or not. The
/// response comes back with its body wrapped in a
/// [`CompletionBody`](crate::classify::CompletionBody), which records at
/// its last frame, an error or its drop, and lets a deferred verdict
/// (gRPC's status) read the trailers. Until then the call is in flight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct AtEndOfBody;

/// Records a call's outcome **when its response arrives**, for a response
/// of any type: an `http::Response<Bytes>` or `http::Response<()>` (no
/// body to wait for), a `reqwest::Response`, a non-HTTP reply. The
/// response comes back unchanged; a verdict deferred to the trailers is
/// decided as if the body had ended without any.
///
/// `C` is the classifier of those responses where the middleware has none
/// of its own: the balancer's
/// ([`ModelBalancer::at_response`](crate::balance::ModelBalancer::at_response));
/// the breaker's is `AtResponse<()>`
/// ([`CircuitBreakerLayer::at_response`](crate::breaker::CircuitBreakerLayer::at_response)),
/// as the breaker has its classifier.
///
/// ```
/// use tower::{service_fn, Layer, ServiceExt};
/// use tower_model_balance::breaker::{BreakerConfig, CircuitBreakerLayer};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// // `http::Response<bytes::Bytes>` has no `http_body::Body` to wait for.
/// let backend = service_fn(|_req: http::Request<()>| async {
///     Ok::<_, std::io::Error>(http::Response::new(bytes::Bytes::from_static(b"ok")))
/// });
/// let breaker = CircuitBreakerLayer::new(BreakerConfig::default()).at_response().layer(backend);
/// let response = breaker.oneshot(http::Request::new(())).await.unwrap();
/// assert_eq!(response.body(), "ok");
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct AtResponse<C = ()> {
    pub(crate) classifier: C,
}

impl<C> AtResponse<C> {
    /// Records when the response arrives, classifying by `classifier`.
    pub const fn new(classifier: C) -> Self {
        Self { classifier }
    }
}
