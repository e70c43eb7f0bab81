//! [`Hedge`]: the `Service` that sends the first attempt, and a backup after
//! the model's delay when the budget and the load gate allow.

use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::time::Instant;
use tower_service::Service;

use super::delay::Place;
use super::future::ResponseFuture;
use super::request::{Backup, CloneRequest};
use super::shared::{Counters, HedgeHandle, Shared, Unplanned};
use crate::backend::PickedSlot;
use crate::classify::{Classify, ServerErrorsAsFailures};
use crate::error::BoxError;
use crate::route::{RequestKind, SendOnce};

/// Sends a backup attempt when the first is slow; see the
/// [module docs](super). Made by [`HedgeLayer`](super::HedgeLayer).
///
/// Readiness is the inner service's (this middleware applies the inner
/// service's backpressure and adds none); the backup's clone of the inner
/// service is polled ready only when the backup is sent. A `call` without
/// a `poll_ready` that returned `Ready` fails with
/// [`NotReady`](crate::error::NotReady): nothing sent, no budget taken,
/// nothing counted in [`HedgeStats`](super::HedgeStats) (the crate's
/// [readiness contract](crate#readiness)).
///
/// # Requirements
///
/// | | |
/// |---|---|
/// | request `Req` | [`CloneRequest`](super::CloneRequest): `http::Request<B>` with `B: Clone` (`Full<Bytes>`, `String`, `()`), or a type of yours |
/// | inner service `S` | `Service<Req> + Clone` (the backup calls a clone) |
/// | error | `S::Error: Into<BoxError>` (`std::error::Error + Send + Sync`) |
/// | classifier `C` | `Classify<S::Response, BoxError> + Clone` (default [`ServerErrorsAsFailures`], for `http::Response<B>`; a closure for any other response) |
/// | returns | `S::Response`, unchanged; errors boxed |
#[derive(Debug)]
pub struct Hedge<S, C = ServerErrorsAsFailures> {
    inner: S,
    shared: Arc<Shared>,
    classify: C,
    /// The last request's slot, reused once its request is done.
    slot: Option<PickedSlot>,
    /// The inner service returned `Ready` since the last `call`.
    ready: bool,
}

impl<S: Clone, C: Clone> Clone for Hedge<S, C> {
    /// Shares the delays, budget and counters; the clone has no slot yet
    /// and has not been polled ready.
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
            classify: self.classify.clone(),
            slot: None,
            ready: false,
        }
    }
}

impl<S, C> Hedge<S, C> {
    pub(crate) fn from_shared(inner: S, shared: Arc<Shared>, classify: C) -> Self {
        Self {
            inner,
            shared,
            classify,
            slot: None,
            ready: false,
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// A handle on the counters, delays and budget shared with the layer.
    pub fn handle(&self) -> HedgeHandle {
        HedgeHandle {
            shared: self.shared.clone(),
        }
    }
}

/// The request's model hash and whether it is an update (never hedged: a
/// write is not idempotent). No route: the shared histogram.
pub(crate) fn route_of<Req: CloneRequest>(req: &Req) -> (Option<u64>, bool) {
    match req.route() {
        Some(route) => (Some(route.hash), route.kind == RequestKind::Update),
        None => (None, false),
    }
}

/// Whether the request is marked [`SendOnce`]: never hedged, retried only
/// when its connection was refused.
pub(crate) fn is_send_once<Req: CloneRequest>(req: &Req) -> bool {
    req.extensions().is_some_and(SendOnce::is_marked)
}

impl<S, C, Req> Service<Req> for Hedge<S, C>
where
    S: Service<Req> + Clone,
    S::Error: Into<BoxError>,
    Req: CloneRequest,
    C: Classify<S::Response, BoxError> + Clone,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S, Req, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if self.ready {
            // Ready stays ready until `call`.
            return Poll::Ready(Ok(()));
        }
        ready!(self.inner.poll_ready(cx)).map_err(Into::into)?;
        self.ready = true;
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Req) -> Self::Future {
        if !std::mem::take(&mut self.ready) {
            // Called without `poll_ready`: nothing sent, nothing counted.
            return ResponseFuture::not_ready(self.shared.clone(), self.classify.clone());
        }
        let now = Instant::now();
        let shared = &self.shared;
        Counters::add(&shared.counters.requests);
        shared.budget.deposit(now);
        let (hash, update) = route_of(&req);
        let place = (!update).then(|| shared.delays.place(hash, now));
        let hedges = shared.policy.max_attempts >= 2;
        let retries = shared.retries.load(std::sync::atomic::Ordering::Relaxed);
        let backup = match place {
            None => Err(Unplanned::Update),
            Some(_) if !hedges => Err(Unplanned::Disabled),
            // Timed as any other request of its model, never copied.
            Some(_) if is_send_once(&req) => Err(Unplanned::SendOnce),
            Some(place) => self.backup(&mut req, place, now),
        };
        let backup = backup
            .map_err(|why| self.shared.counters.unplanned(why))
            .ok();
        if backup.is_none() && retries {
            // For a retry below: where the balancer sent the request.
            self.give_slot(&mut req);
        }
        let first = self.inner.call(req);
        let shared = self.shared.clone();
        ResponseFuture::new(first, backup, shared, place, now, self.classify.clone())
    }
}

impl<S, C> Hedge<S, C> {
    /// Puts a slot for the balancer's pick in `req`'s extensions (this
    /// service's own, when no earlier request holds it still); `None` when
    /// `req` has no extensions.
    fn give_slot<Req: CloneRequest>(&mut self, req: &mut Req) -> Option<PickedSlot> {
        let extensions = req.extensions_mut()?;
        let reused = self.slot.as_mut().is_some_and(PickedSlot::reuse);
        let slot = match &self.slot {
            Some(slot) if reused => slot.clone(),
            _ => self.slot.insert(PickedSlot::new()).clone(),
        };
        extensions.insert(slot.clone());
        Some(slot)
    }
}

impl<S: Clone, C> Hedge<S, C> {
    /// The backup of `req`, when its model has a delay and `req` can be
    /// copied (else why not); puts the shared slot in `req`'s extensions.
    fn backup<Req: CloneRequest>(
        &mut self,
        req: &mut Req,
        place: Place,
        now: Instant,
    ) -> Result<Backup<S, Req>, Unplanned> {
        let delay = self.shared.delays.delay(place, now);
        let delay = delay.ok_or(Unplanned::WarmingUp)?;
        let copy = req.clone_request().ok_or(Unplanned::Uncopyable)?;
        let slot = self.give_slot(req);
        Ok(Backup {
            service: self.inner.clone(),
            request: copy,
            slot,
            deadline: now + delay,
            after_failure: false,
        })
    }
}
