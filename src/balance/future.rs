//! The balancer's response future: what [`ModelBalancer`](crate::balance::ModelBalancer)'s
//! `call` returns, to name in a type that stores one.
//!
//! ```
//! use tower::{discover::ServiceList, service_fn, Service, ServiceExt};
//! use tower_model_balance::backend::BackendId;
//! use tower_model_balance::balance::future::ResponseFuture;
//! use tower_model_balance::balance::{Backend, BalanceConfig, ModelBalancer};
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

use http::StatusCode;
use tokio::sync::watch;

use crate::balance::completion::body::{ResponseBody, Verdict};
use crate::balance::completion::guard::Guard;
use crate::balance::state::placement::{self, Status};
use crate::classify::{Classified, Outcome};
use crate::error::BoxError;
use crate::error::{ModelLoadFailed, UnknownModel};
use crate::placement::WaitedForLoad;
use crate::route::ModelId;

pin_project! {
    /// Response future of [`ModelBalancer`](crate::balance::ModelBalancer): the
    /// endpoint's call to the picked backend, or an immediate typed error
    /// (`InvalidRoute`, `NoHealthyBackend`).
    ///
    /// The endpoint is called at once when it is ready (the common case:
    /// hyper-util's pooled client always is); otherwise the endpoint and
    /// the request wait in one heap cell until it is, so the future stays
    /// the size of the endpoint's own.
    pub struct ResponseFuture<E, Req>
    where
        E: Service<Req>,
    {
        #[pin]
        state: State<E, Req>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<E, Req>
    where
        E: Service<Req>,
    {
        Called { #[pin] future: E::Future, guard: Option<Guard>, waited: bool },
        Waiting { waiting: Option<Box<(E, Req)>>, guard: Option<Guard>, waited: bool },
        Loading {
            load: Pin<Box<dyn Future<Output = Status> + Send>>,
            waiting: Option<Box<(E, Req)>>,
            guard: Option<Guard>,
            model: ModelId,
        },
        Failed { error: Option<BoxError> },
    }
}

impl<E, Req> ResponseFuture<E, Req>
where
    E: Service<Req>,
    E::Error: Into<BoxError>,
{
    /// Calls `endpoint` with `req` if it is ready now; else keeps both
    /// until the first poll finds it ready. An endpoint that fails its
    /// readiness fails the request. Inlined into the balancer's `call`,
    /// so the request moves into the endpoint's `call` without a copy on
    /// the way.
    #[inline]
    pub(crate) fn new(mut endpoint: E, req: Req, guard: Guard) -> Self {
        let state = match endpoint.poll_ready(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(Ok(())) => State::Called {
                future: endpoint.call(req),
                guard: Some(guard),
                waited: false,
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
                waited: false,
            },
        };
        Self { state }
    }

    /// Waits for the load of `model` on the picked backend, then calls
    /// `endpoint` with `req` (see [`placement`](crate::placement)).
    pub(crate) fn loading(
        load: watch::Receiver<Status>,
        model: ModelId,
        endpoint: E,
        req: Req,
        guard: Guard,
    ) -> Self {
        Self {
            state: State::Loading {
                load: Box::pin(placement::wait(load)),
                waiting: Some(Box::new((endpoint, req))),
                guard: Some(guard),
                model,
            },
        }
    }

    pub(crate) fn failed(error: BoxError) -> Self {
        Self {
            state: State::Failed { error: Some(error) },
        }
    }
}

impl<E, Req> std::fmt::Debug for ResponseFuture<E, Req>
where
    E: Service<Req>,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Called { .. } => "called",
            State::Waiting { .. } => "waiting for the endpoint",
            State::Loading { .. } => "waiting for the model to load",
            State::Failed { .. } => "failed",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}

const POLLED_AFTER_COMPLETION: &str = "response future polled after completion";

impl<E, Req, B> Future for ResponseFuture<E, Req>
where
    E: Service<Req, Response = http::Response<B>>,
    E::Error: Into<BoxError>,
    B: http_body::Body,
{
    type Output = Result<http::Response<ResponseBody<B>>, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let mut state = self.as_mut().project().state;
            match state.as_mut().project() {
                StateProj::Called {
                    future,
                    guard,
                    waited,
                } => {
                    let result = ready!(future.poll(cx));
                    let Some(mut guard) = guard.take() else {
                        return Poll::Ready(Err(POLLED_AFTER_COMPLETION.into()));
                    };
                    return Poll::Ready(match result {
                        Ok(mut response) => {
                            guard.answered();
                            if *waited {
                                response.extensions_mut().insert(WaitedForLoad);
                            }
                            if response.status() == StatusCode::NOT_FOUND {
                                not_found(&guard);
                            }
                            guard.read_residency(response.headers());
                            let verdict = guard
                                .classifier()
                                .classify_head(response.status(), response.headers());
                            let verdict = answered(&guard, response.status(), verdict);
                            Ok(response.map(|body| ResponseBody::new(body, guard, verdict)))
                        }
                        Err(error) => {
                            guard.finish(Outcome::Failure);
                            Err(error.into())
                        }
                    });
                }
                StateProj::Waiting {
                    waiting,
                    guard,
                    waited,
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
                    let waited = *waited;
                    state.set(State::Called {
                        future,
                        guard: Some(guard),
                        waited,
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
                                waited: status == Status::Loaded,
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
                StateProj::Failed { error } => {
                    return Poll::Ready(Err(error
                        .take()
                        .unwrap_or_else(|| POLLED_AFTER_COMPLETION.into())))
                }
            }
        }
    }
}

/// A 404 for an inference request: KServe v2 and OpenAI-compatible
/// servers answer it for a model they do not hold now, so the model is
/// absent there, whatever the balancer believed (served, or sent there
/// and maybe loading): the next picks see it absent. With placement on,
/// one reload starts (if the repository knows the model); without, the
/// server did not load it on demand, so for a while the backend is no
/// place to send the model cold: the picks go where it is served.
#[cold]
fn not_found(guard: &Guard) {
    let Some(key) = guard.model() else {
        return;
    };
    let state = guard.state();
    match state.fleet.placement.get() {
        Some(placement) => placement.not_found(state, key),
        // Nobody will load it there: a server that answers 404 rather
        // than load on demand gets the model cold no more for a while.
        None => {
            let now = state.fleet.millis(tokio::time::Instant::now());
            state.residency.refuse(key, now);
        }
    }
}

/// The breaker's verdict on an answer: a 4xx other than 429 says nothing
/// of the backend's health (the classifier ignores it), but it proves the
/// backend answers. A half-open breaker takes it as its probe's success:
/// else a server restarted without its models, answering 404 to every
/// probe, would keep its breaker half-open, reopening at each round's
/// timeout, for as long as nobody loads them.
fn answered(guard: &Guard, status: StatusCode, verdict: Verdict) -> Verdict {
    match verdict {
        Classified::Ready(Outcome::Ignored)
            if status.is_client_error() && guard.admitted_half_open() =>
        {
            Classified::Ready(Outcome::Success)
        }
        verdict => verdict,
    }
}
