//! The balancer's response future: what [`ModelBalancer`](crate::balance::ModelBalancer)'s
//! `call` returns, to name in a type that stores one.
//!
//! ```
//! use tower::{discover::ServiceList, service_fn, Service, ServiceExt};
//! use tower_model_balance::backend::BackendId;
//! use tower_model_balance::balance::future::ResponseFuture;
//! use tower_model_balance::backend::Backend;
//! use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let gpu = service_fn(|_req: http::Request<String>| async {
//!     Ok::<_, std::io::Error>(http::Response::new(String::from("ok")))
//! });
//! let backends = ServiceList::new([Backend::new(BackendId::new("gpu-0").unwrap(), gpu)]);
//! let mut balancer = ModelBalancer::new(backends, BalanceConfig::default()).unwrap();
//! let request = http::Request::post("/infer").header("x-model-id", "llama").body(String::new()).unwrap();
//! let future: ResponseFuture<_, _> = balancer.ready().await.unwrap().call(request);
//! assert_eq!(future.await.unwrap().status(), 200);
//! # }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll, Waker};

use pin_project_lite::pin_project;
use tower_service::Service;

use std::sync::Arc;

use crate::backend::PickedSlot;
use crate::balance::choose::decide::Picked;
use crate::balance::completion::finish::{Finish, Sent};
use crate::balance::completion::guard::Guard;
use crate::balance::queued::Queued;
use crate::balance::state::placement::{Placement, Prepared, Status};
use crate::classify::{AtEndOfBody, Outcome};
use crate::error::BoxError;
use crate::placement::error::{ModelLoadFailed, UnknownModel};
use crate::route::{ModelId, RequestKind, Routable};

pin_project! {
    /// Response future of [`ModelBalancer`](crate::balance::ModelBalancer): the
    /// endpoint's call to the picked backend, or an immediate typed error
    /// (`InvalidRoute`, `NoHealthyBackend`, `Overloaded`), or under admission
    /// a request waiting for room (boxed, as saturation alone builds one).
    ///
    /// The endpoint is called at once when it is ready (the common case:
    /// hyper-util's pooled client always is); otherwise the endpoint and
    /// the request wait in one heap cell until it is, so the future stays
    /// the size of the endpoint's own. `K` is when the outcome is
    /// recorded ([`AtEndOfBody`] or [`AtResponse`](crate::classify::AtResponse)).
    pub struct ResponseFuture<E, Req, K = AtEndOfBody>
    where
        E: Service<Req>,
    {
        #[pin]
        state: State<E, Req>,
        finish: K,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<E, Req>
    where
        E: Service<Req>,
    {
        Called { #[pin] future: E::Future, guard: Option<Guard>, sent: Sent },
        Waiting { waiting: Option<Box<(E, Req)>>, guard: Option<Guard>, sent: Sent },
        Loading {
            load: Pin<Box<dyn Future<Output = Status> + Send>>,
            waiting: Option<Box<(E, Req)>>,
            guard: Option<Guard>,
            model: ModelId,
        },
        Queued { queued: Box<Queued<E, Req>> },
        Failed { error: Option<BoxError> },
    }
}

impl<E, Req, K> ResponseFuture<E, Req, K>
where
    E: Service<Req>,
    E::Error: Into<BoxError>,
    K: Finish<E::Response, E::Error>,
{
    /// A request picked a backend: the hedging layer told where it went,
    /// then the endpoint called — with placement on, after the model's
    /// load on a backend not known to serve it.
    #[inline]
    pub(crate) fn dispatch(picked: Picked<E>, req: Req, finish: K) -> Self
    where
        Req: Routable,
    {
        Self {
            state: State::dispatch(picked, req),
            finish,
        }
    }

    /// A request with no room anywhere, waiting for it.
    pub(crate) fn queued(queued: Queued<E, Req>, finish: K) -> Self {
        Self {
            state: State::Queued {
                queued: Box::new(queued),
            },
            finish,
        }
    }

    pub(crate) fn failed(error: BoxError, finish: K) -> Self {
        Self {
            state: State::Failed { error: Some(error) },
            finish,
        }
    }
}

impl<E, Req> State<E, Req>
where
    E: Service<Req>,
    E::Error: Into<BoxError>,
{
    #[inline]
    fn dispatch(picked: Picked<E>, req: Req) -> Self
    where
        Req: Routable,
    {
        let Picked {
            endpoint,
            mut guard,
        } = picked;
        // A hedging layer's first attempt: tell it where it went.
        let slot = req.extensions().and_then(|x| x.get::<PickedSlot>());
        if let Some(slot) = slot {
            slot.set(guard.backend());
            guard.watch_slot(slot);
        }
        match guard.placement() {
            None => Self::start(endpoint, req, guard),
            Some(placement) => place(&placement, endpoint, req, guard),
        }
    }

    /// Calls `endpoint` with `req` if it is ready now; else keeps both
    /// until the first poll finds it ready. An endpoint that fails its
    /// readiness fails the request. Inlined into the balancer's `call`,
    /// so the request moves into the endpoint's `call` without a copy on
    /// the way.
    #[inline]
    fn start(mut endpoint: E, req: Req, guard: Guard) -> Self {
        match endpoint.poll_ready(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(Ok(())) => State::Called {
                future: endpoint.call(req),
                guard: Some(guard),
                sent: Sent::AtOnce,
            },
            Poll::Ready(Err(error)) => {
                guard.finish(Outcome::Failure);
                State::Failed {
                    error: Some(error.into()),
                }
            }
            Poll::Pending => State::Waiting {
                waiting: Some(Box::new((endpoint, req))),
                guard: Some(guard),
                sent: Sent::AtOnce,
            },
        }
    }
}

/// With placement on: a request picked where its model is not known to be
/// served waits for its load there (or fails at once for a model the
/// repository does not know).
#[cold]
fn place<E, Req>(placement: &Arc<Placement>, endpoint: E, req: Req, guard: Guard) -> State<E, Req>
where
    E: Service<Req>,
    E::Error: Into<BoxError>,
    Req: Routable,
{
    // Only a cold inference request reads its route again (for the model).
    if !guard.is_cold() || guard.model().is_none() {
        return State::start(endpoint, req, guard);
    }
    let model = match req.route() {
        Ok(route) if route.kind == RequestKind::Inference => route.model_id(),
        _ => return State::start(endpoint, req, guard),
    };
    match placement.prepare(guard.state(), model.clone()) {
        Prepared::Wait(load) => State::Loading {
            load,
            waiting: Some(Box::new((endpoint, req))),
            guard: Some(guard),
            model,
        },
        Prepared::Unknown => {
            let backend = guard.backend().clone();
            // Not there, and never to be: the pick's mark is undone.
            guard.state().residency.forget(model.hash64());
            // Cancelled: nothing was sent, nothing counts.
            drop(guard);
            let error = UnknownModel::new(backend, model).into();
            State::Failed { error: Some(error) }
        }
        Prepared::Failed(reason) => {
            let backend = guard.backend().clone();
            guard.state().residency.forget(model.hash64());
            // Not sent: nothing counts (the load that failed counted).
            drop(guard);
            let error = ModelLoadFailed::new(backend, model, reason).into();
            State::Failed { error: Some(error) }
        }
    }
}

impl<E, Req, K> std::fmt::Debug for ResponseFuture<E, Req, K>
where
    E: Service<Req>,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Called { .. } => "called",
            State::Waiting { .. } => "waiting for the endpoint",
            State::Loading { .. } => "waiting for the model to load",
            State::Queued { .. } => "waiting for room under admission",
            State::Failed { .. } => "failed",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}

const POLLED_AFTER_COMPLETION: &str = "response future polled after completion";

impl<E, Req, K> Future for ResponseFuture<E, Req, K>
where
    E: Service<Req> + Clone,
    Req: Routable,
    E::Error: Into<BoxError>,
    K: Finish<E::Response, E::Error>,
{
    type Output = Result<K::Output, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let finish = &*this.finish;
        let mut state = this.state;
        loop {
            match state.as_mut().project() {
                StateProj::Called {
                    future,
                    guard,
                    sent,
                } => {
                    let result = ready!(future.poll(cx));
                    let Some(guard) = guard.take() else {
                        return Poll::Ready(Err(POLLED_AFTER_COMPLETION.into()));
                    };
                    return Poll::Ready(match result {
                        Ok(response) => Ok(finish.response(response, guard, *sent)),
                        Err(error) => {
                            finish.error(&error, guard);
                            Err(error.into())
                        }
                    });
                }
                StateProj::Waiting {
                    waiting,
                    guard,
                    sent,
                } => {
                    let Some(cell) = waiting.as_mut() else {
                        return Poll::Ready(Err(POLLED_AFTER_COMPLETION.into()));
                    };
                    let ready = ready!(cell.0.poll_ready(cx));
                    let (Some((mut endpoint, req)), Some(guard)) =
                        (waiting.take().map(|cell| *cell), guard.take())
                    else {
                        return Poll::Ready(Err(POLLED_AFTER_COMPLETION.into()));
                    };
                    if let Err(error) = ready {
                        guard.finish(Outcome::Failure);
                        return Poll::Ready(Err(error.into()));
                    }
                    let future = endpoint.call(req);
                    let sent = *sent;
                    state.set(State::Called {
                        future,
                        guard: Some(guard),
                        sent,
                    });
                }
                StateProj::Loading {
                    load,
                    waiting,
                    guard,
                    model,
                } => {
                    let status = ready!(load.as_mut().poll(cx));
                    let (Some(cell), Some(guard)) = (waiting.take(), guard.take()) else {
                        return Poll::Ready(Err(POLLED_AFTER_COMPLETION.into()));
                    };
                    let backend = guard.backend().clone();
                    match status.not_pending() {
                        status @ (Status::Loaded | Status::Resident | Status::Pending) => {
                            state.set(State::Waiting {
                                waiting: Some(cell),
                                guard: Some(guard),
                                // Only a load makes it a cold start.
                                sent: match status {
                                    Status::Loaded => Sent::AfterLoad,
                                    _ => Sent::AtOnce,
                                },
                            })
                        }
                        Status::Unknown => {
                            // Cancelled: nothing was sent, nothing counts.
                            drop(guard);
                            let error = UnknownModel::new(backend, model.clone());
                            return Poll::Ready(Err(error.into()));
                        }
                        Status::Failed(reason) | Status::Refused(reason) => {
                            // The load counted its failure once (if the
                            // backend's); the request itself was never sent.
                            drop(guard);
                            let error = ModelLoadFailed::new(backend, model.clone(), reason);
                            return Poll::Ready(Err(error.into()));
                        }
                    }
                }
                StateProj::Queued { queued } => match ready!(queued.poll(cx)) {
                    Ok((picked, req)) => state.set(State::dispatch(picked, req)),
                    Err(error) => return Poll::Ready(Err(error)),
                },
                StateProj::Failed { error } => {
                    return Poll::Ready(Err(error
                        .take()
                        .unwrap_or_else(|| POLLED_AFTER_COMPLETION.into())))
                }
            }
        }
    }
}
