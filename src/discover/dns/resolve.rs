//! The lookup behind `Dns`: a small trait and its hickory-backed default.

use std::fmt;
use std::future::Future;
use std::net::IpAddr;

use hickory_resolver::net::NetError;
use hickory_resolver::TokioResolver;

use crate::error::BoxError;

/// Resolves a hostname to its IP addresses: what [`Dns`](super::Dns)
/// calls on every interval.
///
/// Implemented by [`HickoryResolver`] (the default) and by closures
/// `Fn(&str) -> impl Future<Output = Result<Vec<IpAddr>, BoxError>>`, which
/// suit tests and resolvers of your own (a service registry's HTTP API, a
/// fixed table). The trait returns an `impl Future`, so it is not object
/// safe: `Dns` takes the resolver as a type parameter.
///
/// ```
/// use std::net::{IpAddr, Ipv4Addr};
/// use tower_model_balance::discover::Resolve;
///
/// fn fixed(_name: &str) -> std::future::Ready<Result<Vec<IpAddr>, tower::BoxError>> {
///     std::future::ready(Ok(vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]))
/// }
/// fn takes(_resolver: impl Resolve) {}
/// takes(fixed);
/// ```
pub trait Resolve: Send + Sync + 'static {
    /// The addresses `name` resolves to now, in the resolver's order
    /// (duplicates are dropped by the caller).
    ///
    /// # Errors
    ///
    /// Any failure to get an answer: NXDOMAIN, a timeout, an unreachable
    /// name server. `Dns` keeps the backends it has on an error. An answer
    /// with no address is `Ok` with an empty list, not an error.
    fn resolve(&self, name: &str) -> impl Future<Output = Result<Vec<IpAddr>, BoxError>> + Send;
}

impl<F, Fut> Resolve for F
where
    F: Fn(&str) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Vec<IpAddr>, BoxError>> + Send,
{
    fn resolve(&self, name: &str) -> impl Future<Output = Result<Vec<IpAddr>, BoxError>> + Send {
        self(name)
    }
}

/// The default resolver: hickory-resolver's [`TokioResolver`], reading
/// the system configuration (`/etc/resolv.conf` on Unix, the registry on
/// Windows) and the hosts file (`/etc/hosts`), with its cache (answers are
/// cached for their TTL, so a short interval costs nothing upstream until
/// a record expires) and its own per-query timeout and retries.
///
/// `localhost` (and names under `.localhost`) resolve to the loopback
/// addresses without a query (RFC 6761); names in the hosts file resolve
/// from it; IP literals resolve to themselves.
///
/// A name that exists without an address record of the type asked (a
/// NODATA answer) resolves to an empty list; NXDOMAIN is an error.
#[derive(Clone)]
pub struct HickoryResolver {
    inner: TokioResolver,
}

impl HickoryResolver {
    /// A resolver from the system's DNS configuration.
    ///
    /// Needs no runtime to build; lookups need a Tokio runtime with IO and
    /// time enabled.
    ///
    /// # Errors
    ///
    /// [`SystemConfError`] when the system configuration cannot be read or
    /// parsed — on Unix, when `/etc/resolv.conf` is absent or malformed.
    /// There is no silent fallback to public name servers: a gateway that
    /// quietly asked 8.8.8.8 for an internal name would find nothing, or the
    /// wrong thing. Build one from an explicit configuration with
    /// [`HickoryResolver::new`] instead.
    pub fn from_system_conf() -> Result<Self, SystemConfError> {
        let builder = TokioResolver::builder_tokio().map_err(SystemConfError)?;
        let inner = builder.build().map_err(SystemConfError)?;
        Ok(Self { inner })
    }

    /// Wraps a resolver built as you like (name servers, options, hosts).
    pub fn new(resolver: TokioResolver) -> Self {
        Self { inner: resolver }
    }
}

impl Resolve for HickoryResolver {
    async fn resolve(&self, name: &str) -> Result<Vec<IpAddr>, BoxError> {
        match self.inner.lookup_ip(name).await {
            Ok(lookup) => Ok(lookup.iter().collect()),
            Err(error) if error.is_no_records_found() && !error.is_nx_domain() => Ok(Vec::new()),
            Err(error) => Err(error.into()),
        }
    }
}

impl fmt::Debug for HickoryResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HickoryResolver")
            .field("inner", &self.inner)
            .finish()
    }
}

/// The system's DNS configuration could not be read (on Unix:
/// `/etc/resolv.conf` is absent or malformed). Returned by
/// [`HickoryResolver::from_system_conf`]; the hickory error is its
/// [`source`](std::error::Error::source).
#[derive(Debug)]
pub struct SystemConfError(NetError);

impl fmt::Display for SystemConfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("cannot read the system DNS configuration")
    }
}

impl std::error::Error for SystemConfError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}
