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
/// HTTP request: [`Route::new`] borrows the model name the request holds
/// (checked and hashed as an `x-model-id` header is, so the same model
/// goes to the same owners), with kind, urgency, size and prefix key set
/// by its `with_*` methods. A request that holds a
/// [`RouteInfo`](super::RouteInfo) gives `Ok(Route::from(&info))`.
///
/// ```
/// use tower_model_balance::error::InvalidRoute;
/// use tower_model_balance::route::{Route, Routable, Urgency};
///
/// /// A request of a home-grown RPC protocol.
/// struct Infer {
///     model: String,
///     input: Vec<f32>,
/// }
///
/// impl Routable for Infer {
///     fn route(&self) -> Result<Route<'_>, InvalidRoute> {
///         Route::new(&self.model)
///     }
/// }
///
/// let req = Infer { model: "resnet-50".into(), input: vec![0.5] };
/// assert!(req.route().is_ok());
/// // An invalid name is the request's error: the balancer fails the
/// // request with it, sending it nowhere.
/// let bad = Infer { model: "resnet 50".into(), input: vec![] };
/// assert_eq!(bad.route().unwrap_err().source, "model");
///
/// // Urgency (and kind, size) from other fields of the request.
/// struct Ask<'a> { model: &'a str, urgent: bool }
/// impl Routable for Ask<'_> {
///     fn route(&self) -> Result<Route<'_>, InvalidRoute> {
///         let urgency = if self.urgent { Urgency::High } else { Urgency::Normal };
///         Ok(Route::new(self.model)?.with_urgency(urgency))
///     }
/// }
/// assert!(Ask { model: "llama-3-8b", urgent: true }.route().is_ok());
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
