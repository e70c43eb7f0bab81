//! [`ModelBalancer`]: the balancer as a `Service` — always ready; `call`
//! (after that `poll_ready`, else [`NotReady`]) decides through
//! [`choose`](crate::balance::choose) and drives a clone of the chosen
//! endpoint — with its constructors and the pick API.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Waker};

use tokio::time::Instant;
use tower::discover::Discover;
use tower::util::rng::{HasherRng, Rng};
use tower_service::Service;

use crate::backend::Backend;
use crate::balance::choose::ctx::mix;
use crate::balance::choose::decide::Picked;
use crate::balance::choose::decide::{Local, Refused, Timed};
use crate::balance::completion::finish::Finish;
use crate::balance::config::fields::BalanceConfig;
use crate::balance::error::{DuplicateBackend, NoHealthyBackend, Overloaded};
use crate::balance::future::ResponseFuture;
use crate::balance::handle::BalancerHandle;
use crate::balance::queued::Queued;
use crate::balance::state::clock::Now;
use crate::balance::state::shared::{Shared, View};
use crate::balance::tasks::discovery::{self, Drained, Registry};
use crate::balance::tasks::{self, assign, health};
use crate::classify::{AtEndOfBody, AtResponse};
use crate::error::{BoxError, InvalidRoute, NoRuntime, NotReady};
use crate::route::{Routable, RouteInfo, RouteView};

/// The model-aware balancer; see the [module docs](super).
///
/// `Clone` shares the routing state; each clone draws its own random
/// stream from the injected RNG. `K` is when a request's outcome is
/// recorded: at the end of the response's body ([`AtEndOfBody`], the
/// default) or when it arrives ([`AtResponse`],
/// [`at_response`](Self::at_response)).
///
/// # Requirements
///
/// | | `AtEndOfBody` (default) | `AtResponse<C>` |
/// |---|---|---|
/// | request `Req` | [`Routable`]: `http::Request<B>`, or a type of yours | [`Routable`] |
/// | endpoint `E` | `Service<Req> + Clone`, `Response = http::Response<B>`, `B: http_body::Body` | `Service<Req> + Clone`, any response `T` |
/// | endpoint error | `Into<BoxError>` | `Into<BoxError>` |
/// | classifier | the configuration's [`Classifier`](crate::classify::Classifier) | `C: Classify<T, E::Error>` |
/// | returns | `http::Response<ResponseBody<B>>` | `T`, unchanged |
/// | constructors | `E: Clone + Send + Sync + 'static`, a Tokio runtime | the same |
///
/// `E: Sync` because the backends' endpoints live in state the
/// background tasks share; an endpoint that is `Send` but not `Sync` (a
/// `BoxCloneService`) fits behind tower's `Buffer` or as a
/// `BoxCloneSyncService`.
///
/// `poll_ready` is always ready; a `call` without it fails with
/// [`NotReady`], routing nothing and counting nothing (the crate's
/// [readiness contract](crate#readiness)).
#[derive(Debug)]
pub struct ModelBalancer<E, R = HasherRng, K = AtEndOfBody> {
    shared: Arc<Shared<E>>,
    local: Local,
    rng: R,
    salt: u64,
    finish: K,
    /// `poll_ready` returned `Ready` since the last `call`.
    ready: bool,
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
    /// until every clone and handle of the balancer is dropped.
    /// A second task evaluates backend health every
    /// [`HealthConfigBuilder::interval`](crate::health::HealthConfigBuilder::interval)
    /// until every clone and handle is dropped.
    ///
    /// The balancer routes by [`BackendId`](crate::backend::BackendId):
    /// an `Insert` under a key it holds replaces that backend (tower's
    /// `Change::Insert`), but an `Insert` of an ID already in use under
    /// another key is a second backend it cannot tell apart. In the changes
    /// ready now (the first backend set: all of a `ServiceList`) that is
    /// refused with [`DuplicateBackend`]; in a later batch the insert is
    /// ignored, logged as a `tracing` warning and counted in
    /// [`BalanceStats::ignored_backends`](crate::balance::BalanceStats::ignored_backends).
    ///
    /// # Errors
    ///
    /// Boxed, checked with `err.is::<T>()` (nothing is started in either
    /// case; the configuration was validated by its builder):
    ///
    /// * [`NoRuntime`] when called outside a Tokio runtime;
    /// * [`DuplicateBackend`] naming the ID when the changes `discover`
    ///   has ready now insert one backend ID under two keys.
    ///
    /// ```
    /// use tower::{discover::ServiceList, service_fn};
    /// use tower_model_balance::backend::BackendId;
    /// use tower_model_balance::balance::{Backend, BalanceConfig, ModelBalancer};
    /// use tower_model_balance::error::DuplicateBackend;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let endpoint = service_fn(|_req: http::Request<String>| async {
    ///     Ok::<_, std::io::Error>(http::Response::new(String::new()))
    /// });
    /// let backend = |name: &str| Backend::new(BackendId::new(name).unwrap(), endpoint.clone());
    /// // One backend pasted twice: refused, not halved.
    /// let list = ServiceList::new([backend("gpu-0"), backend("gpu-1"), backend("gpu-0")]);
    /// let error = ModelBalancer::new(list, BalanceConfig::default()).map(drop).unwrap_err();
    /// assert_eq!(error.downcast_ref::<DuplicateBackend>().unwrap().id.as_str(), "gpu-0");
    /// # }
    /// ```
    pub fn new<D>(discover: D, config: BalanceConfig) -> Result<Self, BoxError>
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
    pub fn from_rng<D>(discover: D, config: BalanceConfig, rng: R) -> Result<Self, BoxError>
    where
        D: Discover<Service = Backend<E>> + Send + 'static,
        D::Key: Eq + Send + 'static,
        D::Error: Into<BoxError>,
    {
        let runtime = NoRuntime::current()?;
        let mut discover = Box::pin(discover);
        let mut registry = Registry::new(config.clone());
        let drained = registry.drain(discover.as_mut(), &mut Context::from_waker(Waker::noop()));
        if let Some(id) = registry.take_duplicate() {
            return Err(DuplicateBackend::new(id).into());
        }
        // From an empty ring: the first backend set lands in one step.
        registry.step();
        let interval = config.health.interval;
        let (gone, on_gone) = tokio::sync::watch::channel(());
        let shared = Arc::new(Shared::new(registry.snapshot(), config, gone));
        if drained != Drained::Done {
            let weak = Arc::downgrade(&shared);
            tasks::spawn(&runtime, discovery::run(discover, registry, weak, on_gone));
        }
        let gone = shared.gone();
        let view: Weak<dyn View> = Arc::downgrade(&shared) as Weak<dyn View>;
        tasks::spawn(&runtime, health::run(view.clone(), interval, gone));
        tasks::spawn(&runtime, assign::run(view, shared.gone()));
        Ok(Self {
            local: Local::new(),
            shared,
            rng,
            salt: 0,
            finish: AtEndOfBody,
            ready: false,
        })
    }
}

impl<E, R, K> ModelBalancer<E, R, K> {
    /// Records each request's outcome when its response arrives,
    /// classified by `classifier`, rather than at the end of an HTTP
    /// body: for endpoints whose responses are not `http::Response<B>`
    /// with a streaming body — an `http::Response<Bytes>` (with
    /// [`Classifier::http`](crate::classify::Classifier::http)), a
    /// `reqwest::Response`, a non-HTTP reply (a closure over
    /// `Result<&T, &E>`). The response comes back unchanged. The HTTP
    /// readings of the default (a 404 marking the model absent, the
    /// residency header) need the HTTP head, so they do not apply.
    pub fn at_response<C>(self, classifier: C) -> ModelBalancer<E, R, AtResponse<C>> {
        ModelBalancer {
            shared: self.shared,
            local: self.local,
            rng: self.rng,
            salt: self.salt,
            finish: AtResponse::new(classifier),
            ready: self.ready,
        }
    }
}

impl<E: Clone, R: Rng, K> ModelBalancer<E, R, K> {
    /// Picks a backend for `route` at `now`, for callers that are not
    /// `Service`s (a custom client, a queue consumer): the same decision,
    /// state and counters as the `Service` path. Send the request with the
    /// returned endpoint (or to [`Picked::backend`] by other means), then
    /// give the outcome back with [`Guard::finish`](crate::balance::Guard::finish); dropping the guard
    /// counts the request as cancelled.
    ///
    /// `now` is the current time on Tokio's clock
    /// (`tokio::time::Instant::now()`, or a caller's reading of it), which
    /// the balancer's own timers and breakers run on; it is taken as given.
    /// An instant ahead of that clock moves the times recorded with it
    /// (a breaker opened at it, a model's last use) ahead too: a breaker
    /// tripped by failures finished at an hour from now stays open until
    /// then. An instant behind it counts as no time passed.
    ///
    /// # Errors
    ///
    /// [`NoHealthyBackend`] naming the model when no backend admits the
    /// request; under [admission](crate::balance::AdmissionConfig),
    /// [`Overloaded`] when every backend it could go to is at its limit
    /// (the pick API never queues: it sheds at once, whatever the urgency).
    ///
    /// ```
    /// use futures_util::stream;
    /// use tower::discover::Change;
    /// use tower_model_balance::backend::BackendId;
    /// use tower_model_balance::balance::{Backend, BalanceConfig, ModelBalancer};
    /// use tower_model_balance::classify::Outcome;
    /// use tower_model_balance::route::{ModelId, RouteInfo};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// // Endpoints can be anything Clone: here, the address to send to.
    /// let backends = (0..3).map(|i| {
    ///     let id = BackendId::new(&format!("node-{i}")).unwrap();
    ///     Ok::<_, std::convert::Infallible>(Change::Insert(i, Backend::new(id, format!("10.0.0.{i}:8000"))))
    /// });
    /// let mut balancer = ModelBalancer::new(stream::iter(backends), BalanceConfig::default()).unwrap();
    /// let route = RouteInfo::new(ModelId::new("llama-3-8b").unwrap());
    /// let picked = balancer.pick(&route, tokio::time::Instant::now()).unwrap();
    /// assert_eq!(balancer.handle().in_flight(), 1);
    /// // ... send to picked.endpoint, then:
    /// picked.guard.finish(Outcome::Success);
    /// assert_eq!(balancer.handle().in_flight(), 0);
    /// # }
    /// ```
    pub fn pick(&mut self, route: &RouteInfo, now: Instant) -> Result<Picked<E>, BoxError> {
        let (rng, salt) = (&mut self.rng, self.salt);
        let mut random = || mix(rng.next_u64() ^ salt);
        let shared = &self.shared;
        let now = Now::at(now);
        // A `RouteInfo` carries no exclusion: only `NoBackend` is reached.
        match self.local.route(
            shared,
            &RouteView::from(route),
            &now,
            Timed::Always,
            &mut random,
        ) {
            Ok(picked) => Ok(picked),
            Err(Refused::NoBackend(e)) => Err(e.into()),
            Err(Refused::NoAlternative(_)) => {
                Err(NoHealthyBackend::new(route.model.clone()).into())
            }
            // The pick API does not queue: it sheds at once.
            Err(Refused::Saturated(shed)) => {
                shared.stats.shed(shed.urgency);
                Err(shed.into())
            }
        }
    }
}

impl<E, R, K> ModelBalancer<E, R, K> {
    /// A handle to read counters and backend states.
    pub fn handle(&self) -> BalancerHandle
    where
        E: Send + Sync + 'static,
    {
        BalancerHandle::new(self.shared.clone())
    }
}

impl<E, R: Clone, K: Clone> Clone for ModelBalancer<E, R, K> {
    /// Shares the routing state; the clone gets its own random stream and
    /// has not been polled ready.
    fn clone(&self) -> Self {
        let n = self.shared.clones.fetch_add(1, Ordering::Relaxed) + 1;
        Self {
            shared: self.shared.clone(),
            local: self.local.fork(mix(n ^ 0x5a3c_96e1)),
            rng: self.rng.clone(),
            salt: mix(n),
            finish: self.finish.clone(),
            ready: false,
        }
    }
}

impl<E, R, K, Req> Service<Req> for ModelBalancer<E, R, K>
where
    Req: Routable,
    E: Service<Req> + Clone,
    E::Error: Into<BoxError>,
    K: Finish<E::Response, E::Error> + Clone,
    R: Rng,
{
    type Response = K::Output;
    type Error = BoxError;
    type Future = ResponseFuture<E, Req, K>;

    /// Always ready: the balancer sheds in `call` rather than reserving.
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.ready = true;
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let finish = self.finish.clone();
        if !std::mem::take(&mut self.ready) {
            // Called without `poll_ready`: nothing routed, nothing counted.
            return ResponseFuture::failed(not_ready(), finish);
        }
        let route: RouteView<'_> = match req.route() {
            Ok(route) => route,
            Err(error) => return ResponseFuture::failed(self.invalid(error), finish),
        };
        let (rng, salt) = (&mut self.rng, self.salt);
        let mut random = || mix(rng.next_u64() ^ salt);
        let now = Now::lazy();
        let picked = self
            .local
            .route(&self.shared, &route, &now, Timed::Sampled, &mut random);
        match picked {
            Ok(picked) => ResponseFuture::dispatch(picked, req, finish),
            Err(Refused::Saturated(shed)) => self.saturated(req, shed, finish),
            Err(error) => ResponseFuture::failed(error.into(), finish),
        }
    }
}

impl<E, R: Rng, K> ModelBalancer<E, R, K> {
    /// Every backend `req` could go to is at its admission limit: it waits
    /// for room as its urgency allows, or is shed at once.
    #[cold]
    #[inline(never)]
    fn saturated<Req>(&mut self, req: Req, shed: Overloaded, finish: K) -> ResponseFuture<E, Req, K>
    where
        E: Service<Req> + Clone,
        E::Error: Into<BoxError>,
        K: Finish<E::Response, E::Error>,
    {
        let seed = mix(self.rng.next_u64() ^ self.salt);
        match Queued::enter(&self.shared, req, shed, seed) {
            Ok(queued) => ResponseFuture::queued(queued, finish),
            Err((_req, shed)) => {
                self.shared.stats.shed(shed.urgency);
                ResponseFuture::failed(shed.into(), finish)
            }
        }
    }
}

/// The error of a call made without `poll_ready` (out of line, as
/// `invalid` below).
#[cold]
#[inline(never)]
fn not_ready() -> BoxError {
    NotReady.into()
}

impl<E, R, K> ModelBalancer<E, R, K> {
    /// Counts and fails a request whose route is invalid (out of line:
    /// the error path stays out of `call`'s code and stack frame).
    #[cold]
    #[inline(never)]
    fn invalid(&self, error: InvalidRoute) -> BoxError {
        let stats = &self.shared.stats;
        stats.invalid_route.fetch_add(1, Ordering::Relaxed);
        error.into()
    }
}

#[cfg(test)]
mod tests;
