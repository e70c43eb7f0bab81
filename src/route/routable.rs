//! [`Routable`]: the requests the balancer reads a route from.

use http::Extensions;

use super::view::Route;
use crate::route::error::InvalidRoute;

/// A request the balancer can route: it gives its [`Route`] (model,
/// kind, urgency, size) and, optionally, the extensions a hedge above the
/// balancer reads and writes (which backend the first attempt went to,
/// which one a backup must avoid).
///
/// Implemented for `http::Request<B>`: a [`RouteInfo`](super::RouteInfo)
/// in its extensions, else its headers (see the [module docs](super)).
/// For any other request — a queue message, a gRPC client's own request
/// type, an RPC struct — implement it, and the balancer routes it as an
/// HTTP request.
///
/// ```
/// use tower_model_balance::error::InvalidRoute;
/// use tower_model_balance::route::{ModelId, Route, RouteInfo, Routable};
///
/// /// A request of a home-grown RPC protocol.
/// struct Infer {
///     route: RouteInfo,
///     input: Vec<f32>,
/// }
///
/// impl Routable for Infer {
///     fn route(&self) -> Result<Route<'_>, InvalidRoute> {
///         Ok(Route::from(&self.route))
///     }
/// }
///
/// let req = Infer { route: RouteInfo::new(ModelId::new("resnet-50").unwrap()), input: vec![0.5] };
/// assert!(req.route().is_ok());
/// # drop(req.input);
/// ```
#[diagnostic::on_unimplemented(
    message = "the balancer cannot read a route from a `{Self}`",
    label = "not a request the balancer can route",
    note = "`http::Request<B>` is routable (its `RouteInfo` extension, else its `x-model-id` header); for another request type implement `tower_model_balance::route::Routable`"
)]
pub trait Routable {
    /// The request's route.
    ///
    /// # Errors
    ///
    /// [`InvalidRoute`] naming the source (a header, the body) when the
    /// request names no valid model or carries an invalid value; the
    /// balancer fails the request with it, counted as an invalid route.
    fn route(&self) -> Result<Route<'_>, InvalidRoute>;

    /// The request's extensions, if it has any (default `None`): where a
    /// hedge above the balancer finds out which backend its first attempt
    /// went to.
    fn extensions(&self) -> Option<&Extensions> {
        None
    }
}

impl<B> Routable for http::Request<B> {
    #[inline]
    fn route(&self) -> Result<Route<'_>, InvalidRoute> {
        Route::from_parts(self.extensions(), self.headers())
    }

    #[inline]
    fn extensions(&self) -> Option<&Extensions> {
        Some(self.extensions())
    }
}
