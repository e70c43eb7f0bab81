use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::time::Instant;
use tower_service::Service;

use super::delay::Place;
use super::future::{Backup, ResponseFuture};
use super::shared::{Counters, HedgeHandle, Shared};
use super::{Classify, CloneRequest, ServerErrors};
use crate::backend::PickedSlot;
use crate::error::BoxError;
use crate::route::{RequestKind, RouteInfo, RouteView};

/// Sends a backup attempt when the first is slow; see the
/// [module docs](super). Made by [`HedgeLayer`](super::HedgeLayer).
///
/// Readiness is the inner service's (this middleware applies the inner
/// service's backpressure and adds none); the backup's clone of the inner
/// service is polled ready only when the backup is sent.
#[derive(Debug, Clone)]
pub struct Hedge<S, C = ServerErrors> {
    inner: S,
    shared: Arc<Shared>,
    classify: C,
}

impl<S, C> Hedge<S, C> {
    pub(crate) fn from_shared(inner: S, shared: Arc<Shared>, classify: C) -> Self {
        Self {
            inner,
            shared,
            classify,
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
fn route_of<Req: CloneRequest>(req: &Req) -> (Option<u64>, bool) {
    let view = match (req.extensions(), req.headers()) {
        (Some(extensions), Some(headers)) => RouteView::from_parts(extensions, headers).ok(),
        (None, Some(headers)) => RouteView::from_headers(headers).ok(),
        (Some(extensions), None) => extensions.get::<RouteInfo>().map(RouteView::from),
        (None, None) => None,
    };
    match view {
        Some(view) => (Some(view.hash), view.kind == RequestKind::Update),
        None => (None, false),
    }
}

impl<S, C, Req> Service<Req> for Hedge<S, C>
where
    S: Service<Req> + Clone,
    S::Error: Into<BoxError>,
    Req: CloneRequest,
    C: Classify<S::Response>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = ResponseFuture<S, Req, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Req) -> Self::Future {
        let now = Instant::now();
        let shared = &self.shared;
        Counters::add(&shared.counters.requests);
        shared.budget.deposit(now);
        let (hash, update) = route_of(&req);
        let place = (!update).then(|| shared.delays.place(hash));
        let backup = match place {
            Some(place) if shared.policy.max_attempts >= 2 => self.backup(&mut req, place, now),
            _ => None,
        };
        let first = self.inner.call(req);
        ResponseFuture::new(
            first,
            backup,
            shared.clone(),
            place,
            now,
            self.classify.clone(),
        )
    }
}

impl<S: Clone, C> Hedge<S, C> {
    /// The backup of `req`, when its model has a delay and `req` can be
    /// copied; puts the shared slot in `req`'s extensions.
    fn backup<Req: CloneRequest>(
        &self,
        req: &mut Req,
        place: Place,
        now: Instant,
    ) -> Option<Backup<S, Req>> {
        let delay = self.shared.delays.delay(place, now)?;
        let copy = req.clone_request()?;
        let slot = req.extensions_mut().map(|extensions| {
            let slot = PickedSlot::new();
            extensions.insert(slot.clone());
            slot
        });
        Some(Backup {
            service: self.inner.clone(),
            request: copy,
            slot,
            deadline: now + delay,
        })
    }
}
