use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use tokio::time::Instant;
use tower::discover::Discover;
use tower::util::rng::{HasherRng, Rng};
use tower::util::Oneshot;
use tower::ServiceExt;
use tower_service::Service;

use super::body::{InFlight, ResponseBody};
use super::demand::owners_needed;
use super::discover::{self, Drained, Registry};
use super::future::ResponseFuture;
use super::pick::pick;
use super::{Backend, BalanceConfig, BalancerHandle, Shared};
use crate::error::{BoxError, InvalidConfig, NoHealthyBackend};
use crate::route::{RequestKind, RouteView};

/// The model-aware balancer; see the [module docs](super).
///
/// `Clone` shares the routing state; each clone draws its own random
/// stream from the injected RNG.
#[derive(Debug)]
pub struct ModelBalancer<E, R = HasherRng> {
    shared: Arc<Shared<E>>,
    rng: R,
    salt: u64,
}

impl<E> ModelBalancer<E>
where
    E: Clone + Send + Sync + 'static,
{
    /// Builds a balancer over the backends `discover` yields, with a
    /// randomly seeded RNG for P2C.
    ///
    /// Changes `discover` has ready now are applied before this returns; a
    /// background task on the current Tokio runtime applies later ones until
    /// the source ends or fails (the last backend set stays in force), or
    /// until the first change after every clone of the balancer is dropped.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming `runtime` when called outside a Tokio
    /// runtime while `discover` has not ended.
    pub fn new<D>(discover: D, config: BalanceConfig) -> Result<Self, InvalidConfig>
    where
        D: Discover<Service = Backend<E>> + Send + 'static,
        D::Key: Eq + Send + 'static,
        D::Error: Into<BoxError>,
    {
        Self::from_rng(discover, config, HasherRng::default())
    }
}

impl<E, R> ModelBalancer<E, R>
where
    E: Clone + Send + Sync + 'static,
    R: Rng + Clone,
{
    /// As [`ModelBalancer::new`], sampling with `rng` (for deterministic
    /// tests and simulations).
    ///
    /// # Errors
    ///
    /// As [`ModelBalancer::new`].
    pub fn from_rng<D>(discover: D, config: BalanceConfig, rng: R) -> Result<Self, InvalidConfig>
    where
        D: Discover<Service = Backend<E>> + Send + 'static,
        D::Key: Eq + Send + 'static,
        D::Error: Into<BoxError>,
    {
        let mut discover = Box::pin(discover);
        let mut registry = Registry::new(config.clone());
        let drained = registry.drain(discover.as_mut(), &mut Context::from_waker(Waker::noop()));
        let shared = Arc::new(Shared::new(registry.snapshot(), config));
        if drained != Drained::Done {
            let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
                InvalidConfig::new(
                    "runtime",
                    "a Tokio runtime entered when the balancer is built",
                )
            })?;
            runtime.spawn(discover::run(discover, registry, Arc::downgrade(&shared)));
        }
        Ok(Self {
            shared,
            rng,
            salt: 0,
        })
    }
}

impl<E, R> ModelBalancer<E, R> {
    /// A handle to read counters and backend states.
    pub fn handle(&self) -> BalancerHandle
    where
        E: Send + Sync + 'static,
    {
        BalancerHandle::new(self.shared.clone())
    }
}

impl<E, R: Clone> Clone for ModelBalancer<E, R> {
    fn clone(&self) -> Self {
        let n = self.shared.clones.fetch_add(1, Ordering::Relaxed) + 1;
        Self {
            shared: self.shared.clone(),
            rng: self.rng.clone(),
            salt: mix(n),
        }
    }
}

impl<E, R, B, RB> Service<http::Request<B>> for ModelBalancer<E, R>
where
    E: Service<http::Request<B>, Response = http::Response<RB>> + Clone,
    E::Error: Into<BoxError>,
    RB: http_body::Body,
    R: Rng,
{
    type Response = http::Response<ResponseBody<RB>>;
    type Error = BoxError;
    type Future = ResponseFuture<Oneshot<E, http::Request<B>>>;

    /// Always ready: the balancer sheds in `call` rather than reserving.
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let stats = &self.shared.stats;
        let route = match RouteView::from_parts(req.extensions(), req.headers()) {
            Ok(route) => route,
            Err(error) => {
                stats.invalid_route.fetch_add(1, Ordering::Relaxed);
                return ResponseFuture::failed(error.into());
            }
        };
        let snapshot = self.shared.snapshot.load();
        let (rng, salt) = (&mut self.rng, self.salt);
        let mut random = || mix(rng.next_u64() ^ salt);
        let config = &self.shared.config;
        let owners = match route.kind {
            RequestKind::Update => 0,
            _ => {
                let share = self.shared.demand.record(route.hash);
                let n = snapshot.table.backends.len();
                owners_needed(
                    share,
                    n,
                    config.load_factor,
                    config.min_owners,
                    config.owners,
                )
            }
        };
        let now = Instant::now();
        let c = config.load_factor;
        let table = &snapshot.table;
        let Some(picked) = pick(table, route.kind, route.hash, owners, c, now, &mut random) else {
            stats.no_backend.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(model = route.model, "no healthy backend");
            return ResponseFuture::failed(NoHealthyBackend::new(route.model_id()).into());
        };
        stats.count(picked.branch);
        let state = &snapshot.table.backends[picked.index];
        tracing::trace!(backend = %state.id, model = route.model, branch = ?picked.branch, "picked");
        let guard = InFlight::new(state.clone(), picked.permit);
        let endpoint = snapshot.endpoints[picked.index].clone();
        ResponseFuture::new(endpoint.oneshot(req), guard)
    }
}

/// SplitMix64's finalizer: decorrelates clones' streams and weak RNGs.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
