//! The hedged response future.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};
use tower_service::Service;

use super::delay::Place;
use super::shared::{Counters, Shared};
use super::{Classify, CloneRequest};
use crate::backend::{Exclude, PickedSlot};
use crate::error::BoxError;

/// A backup not yet sent: the inner service's clone (not yet polled
/// ready), the request's copy, the first attempt's slot, when to send.
pub(crate) struct Backup<S, Req> {
    pub(crate) service: S,
    pub(crate) request: Req,
    pub(crate) slot: Option<PickedSlot>,
    pub(crate) deadline: Instant,
}

pin_project! {
    #[project = AttemptProj]
    enum Attempt<F> {
        Running { #[pin] future: F, sent: Instant },
        Done,
    }
}

pin_project! {
    #[project = TimerProj]
    enum Timer {
        // Not armed yet: the timer starts on the first poll that finds the
        // first attempt pending, so an answer ready at once costs no timer.
        Unarmed,
        Sleeping { #[pin] sleep: Sleep },
        Fired,
    }
}

pin_project! {
    /// The response future of [`Hedge`](super::Hedge): the first attempt,
    /// the backup once sent, and the timer between them.
    ///
    /// Resolves to the first success; a failure (an error, or a response
    /// the classifier calls one) waits for the other attempt when one is
    /// running, and is returned when every attempt failed (the last to
    /// finish). Dropping it drops every attempt.
    pub struct ResponseFuture<S, Req, C>
    where
        S: Service<Req>,
    {
        #[pin]
        first: Attempt<S::Future>,
        #[pin]
        second: Attempt<S::Future>,
        #[pin]
        timer: Timer,
        backup: Option<Backup<S, Req>>,
        // The backup's clone is being polled ready.
        firing: bool,
        // A failed attempt's result, returned if the other fails too.
        failed: Option<Result<S::Response, BoxError>>,
        shared: Arc<Shared>,
        // The model's latency window; `None`: not timed (an update).
        place: Option<Place>,
        classify: C,
    }
}

impl<S, Req, C> ResponseFuture<S, Req, C>
where
    S: Service<Req>,
{
    pub(crate) fn new(
        first: S::Future,
        backup: Option<Backup<S, Req>>,
        shared: Arc<Shared>,
        place: Option<Place>,
        sent: Instant,
        classify: C,
    ) -> Self {
        let timer = if backup.is_some() {
            Timer::Unarmed
        } else {
            Timer::Fired
        };
        Self {
            first: Attempt::Running {
                future: first,
                sent,
            },
            second: Attempt::Done,
            timer,
            backup,
            firing: false,
            failed: None,
            shared,
            place,
            classify,
        }
    }
}

impl<S, Req, C> fmt::Debug for ResponseFuture<S, Req, C>
where
    S: Service<Req>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("first", &matches!(self.first, Attempt::Running { .. }))
            .field("second", &matches!(self.second, Attempt::Running { .. }))
            .field("backup", &self.backup.is_some())
            .finish_non_exhaustive()
    }
}

/// Polls one attempt: its result when it finished now (it is then Done),
/// with its send time.
fn poll_attempt<F, T, E>(
    mut attempt: Pin<&mut Attempt<F>>,
    cx: &mut Context<'_>,
) -> Option<(Result<T, BoxError>, Instant)>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    let AttemptProj::Running { future, sent } = attempt.as_mut().project() else {
        return None;
    };
    let Poll::Ready(result) = future.poll(cx) else {
        return None;
    };
    let sent = *sent;
    attempt.set(Attempt::Done);
    Some((result.map_err(Into::into), sent))
}

impl<S, Req, C> Future for ResponseFuture<S, Req, C>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    Req: CloneRequest,
    C: Classify<S::Response>,
{
    type Output = Result<S::Response, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let fails = |result: &Result<S::Response, BoxError>| match result {
                Ok(response) => this.classify.is_failure(response),
                Err(_) => true,
            };
            // The first attempt.
            if let Some((result, sent)) = poll_attempt(this.first.as_mut(), cx) {
                if !fails(&result) {
                    // Won: the backup, if any, is dropped (cancelled).
                    let now = Instant::now();
                    if let Some(place) = *this.place {
                        this.shared.delays.record(place, now - sent, now);
                    }
                    return Poll::Ready(result);
                }
                // A response (even a failed one) ends hedging.
                *this.backup = None;
                *this.firing = false;
                if matches!(*this.second, Attempt::Done) {
                    return Poll::Ready(result);
                }
                *this.failed = Some(result);
            }
            // The backup.
            if let Some((result, sent)) = poll_attempt(this.second.as_mut(), cx) {
                if !fails(&result) {
                    let now = Instant::now();
                    Counters::add(&this.shared.counters.won);
                    if let Some(place) = *this.place {
                        let delays = &this.shared.delays;
                        delays.record(place, now - sent, now);
                        // The superseded first attempt: how long it ran, a
                        // lower bound of its latency, so that the slow
                        // answers hedging cuts short still count.
                        if let AttemptProj::Running { sent, .. } = this.first.as_mut().project() {
                            delays.record(place, now - *sent, now);
                        }
                    }
                    this.first.set(Attempt::Done);
                    return Poll::Ready(result);
                }
                if matches!(*this.first, Attempt::Done) {
                    return Poll::Ready(result);
                }
                *this.failed = Some(result);
            }
            if matches!(*this.first, Attempt::Done) && matches!(*this.second, Attempt::Done) {
                // Both failed: the last failure was returned above; only a
                // first attempt that failed while the backup was never
                // sent gets here, and it was returned too. Defensive.
                return Poll::Ready(
                    this.failed
                        .take()
                        .unwrap_or_else(|| Err("hedge: no attempt left".into())),
                );
            }
            // Send the backup once its delay has passed.
            let Some(backup) = this.backup.as_mut() else {
                return Poll::Pending;
            };
            if *this.firing {
                if let Err(error) = ready!(backup.service.poll_ready(cx)) {
                    // The backup cannot be sent: the first attempt goes on.
                    tracing::debug!(error = %error.into(), "hedge: backup not ready");
                    *this.backup = None;
                    *this.firing = false;
                    continue;
                }
                let Some(Backup {
                    mut service,
                    mut request,
                    slot,
                    ..
                }) = this.backup.take()
                else {
                    return Poll::Pending;
                };
                *this.firing = false;
                let picked = slot.as_ref().and_then(PickedSlot::get);
                if let (Some(picked), Some(extensions)) = (picked, request.extensions_mut()) {
                    extensions.insert(Exclude::new(picked.clone()));
                }
                Counters::add(&this.shared.counters.hedges);
                let future = service.call(request);
                this.second.set(Attempt::Running {
                    future,
                    sent: Instant::now(),
                });
                continue;
            }
            match this.timer.as_mut().project() {
                TimerProj::Unarmed => {
                    let sleep = tokio::time::sleep_until(backup.deadline);
                    this.timer.set(Timer::Sleeping { sleep });
                }
                TimerProj::Sleeping { sleep } => {
                    ready!(sleep.poll(cx));
                    this.timer.set(Timer::Fired);
                    if this.shared.may_hedge(Instant::now()) {
                        *this.firing = true;
                    } else {
                        *this.backup = None;
                        return Poll::Pending;
                    }
                }
                TimerProj::Fired => return Poll::Pending,
            }
        }
    }
}
