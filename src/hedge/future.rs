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
use super::refusal::{no_alternative, refused, shed};
use super::shared::{Counters, Shared};
use super::CloneRequest;
use crate::backend::{Exclude, PickedSlot};
use crate::classify::{Classified, Classify, Outcome};
use crate::error::{BoxError, InvalidRoute, PayloadTooLarge};

/// A backup not yet sent: the inner service's clone (not yet polled
/// ready), the request's copy, the first attempt's slot, when to send.
pub(crate) struct Backup<S, Req> {
    pub(crate) service: S,
    pub(crate) request: Req,
    pub(crate) slot: Option<PickedSlot>,
    pub(crate) deadline: Instant,
    /// The first attempt failed before the backup went: the backup is a
    /// retry, and avoids that backend whenever another is eligible
    /// ([`Exclude::strict`]).
    pub(crate) after_failure: bool,
}

/// What an attempt's result is to the race.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// An answer, which wins: classified [`Outcome::Success`] or
    /// [`Outcome::Ignored`] (the caller's own 4xx: another backend would
    /// say the same), or deferred to the end of its body (a success as far
    /// as its head goes).
    Answer,
    /// A failure: an error, or a response classified [`Outcome::Failure`].
    /// It waits for an attempt still running, and before the backup's
    /// delay sends the backup at once.
    Failure,
    /// A backend that shed the call ([`Outcome::Overload`]: 429, gRPC
    /// `RESOURCE_EXHAUSTED`): it waits for an attempt still running, but
    /// never sends a backup — one during an overload adds load where there
    /// is no room for it.
    Overload,
}

/// The verdict on `result` by `classify`. Errors are failures, except the
/// balancer's [`Overloaded`](crate::error::Overloaded) (its admission
/// shed the call): an overload.
fn verdict<C, R>(classify: &C, result: &Result<R, BoxError>) -> Verdict
where
    C: Classify<R, BoxError>,
{
    match result {
        Err(error) if shed(error) => Verdict::Overload,
        Err(_) => Verdict::Failure,
        Ok(response) => match classify.classify_response(response) {
            Classified::Ready(Outcome::Failure) => Verdict::Failure,
            Classified::Ready(Outcome::Overload) => Verdict::Overload,
            _ => Verdict::Answer,
        },
    }
}

/// Whether a failed first attempt is worth a backup sent at once: a
/// response the classifier calls a failure (5xx by default), or an error
/// other than the balancer's refusals that every backend would give alike
/// (no backend, an unreadable route or body, a model no repository
/// knows, a backup with nowhere to go, every backend at its admission
/// limit).
fn worth_a_backup<R>(result: &Result<R, BoxError>) -> bool {
    match result {
        Ok(_) => true,
        Err(error) => {
            !(error.is::<InvalidRoute>() || error.is::<PayloadTooLarge>() || refused(error))
        }
    }
}

pin_project! {
    #[project = AttemptProj]
    enum Attempt<F> {
        Running { #[pin] future: F, sent: Instant },
        Done,
    }
}

pin_project! {
    /// The backup, from parked to sent; one state at a time, so the future
    /// carries the copy, the timer and the backup's future in one place.
    #[project = SecondProj]
    #[project_replace = SecondReplace]
    enum Second<S, Req, F> {
        // Waiting: the timer starts on the first poll that finds the first
        // attempt pending, so an answer ready at once costs no timer.
        Parked { backup: Backup<S, Req> },
        Sleeping { backup: Backup<S, Req>, #[pin] sleep: Sleep },
        // The delay passed and the gate and budget allowed it: the
        // service's clone is polled ready.
        Firing { backup: Backup<S, Req> },
        // Sent; with the first attempt's slot, marked superseded if the
        // backup answers first.
        Running { #[pin] future: F, sent: Instant, slot: Option<PickedSlot> },
        Done,
    }
}

pin_project! {
    /// The response future of [`Hedge`](super::Hedge): the first attempt,
    /// and the backup (parked, on its timer, or sent).
    ///
    /// Resolves to the first answer (a response classified a success or
    /// ignored); a failure (an error, or a response the classifier calls
    /// one) or an overload (429) waits for the other attempt when one is
    /// running, and is returned when no attempt answered (the last to
    /// finish). A first attempt that fails before its backup went sends
    /// the backup at once, as a retry on another backend, when the load
    /// gate and the budget allow (gRPC's hedging, gRFC A6), else is
    /// returned at once; an overload never sends it, and is returned at
    /// once. Dropping it drops every attempt.
    pub struct ResponseFuture<S, Req, C>
    where
        S: Service<Req>,
    {
        #[pin]
        first: Attempt<S::Future>,
        #[pin]
        second: Second<S, Req, S::Future>,
        shared: Arc<Shared>,
        // The model's latency window; `None`: not timed (an update).
        place: Option<Place>,
        classify: C,
    }

    impl<S, Req, C> PinnedDrop for ResponseFuture<S, Req, C>
    where
        S: Service<Req>,
    {
        // A backup never sent, nor counted suppressed: the first attempt
        // ended (or the caller left) before it was due. One about to go
        // gives its budget back.
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            let shared = &**this.shared;
            match this.second.project() {
                SecondProj::Parked { .. } | SecondProj::Sleeping { .. } => {}
                SecondProj::Firing { .. } => shared.budget.refund(Instant::now()),
                SecondProj::Running { .. } | SecondProj::Done => return,
            }
            Counters::add(&shared.counters.in_time);
        }
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
        Self {
            first: Attempt::Running {
                future: first,
                sent,
            },
            second: match backup {
                Some(backup) => Second::Parked { backup },
                None => Second::Done,
            },
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
        let second = match self.second {
            Second::Parked { .. } | Second::Sleeping { .. } => "waiting",
            Second::Firing { .. } => "firing",
            Second::Running { .. } => "running",
            Second::Done => "done",
        };
        f.debug_struct("ResponseFuture")
            .field("first", &matches!(self.first, Attempt::Running { .. }))
            .field("second", &second)
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
    C: Classify<S::Response, BoxError>,
{
    type Output = Result<S::Response, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let classify = &*this.classify;
        // The first attempt, polled once per call.
        if let Some((result, sent)) = poll_attempt(this.first.as_mut(), cx) {
            let verdict = verdict(classify, &result);
            if verdict == Verdict::Answer {
                // Won: the backup, if any, is dropped (cancelled).
                let now = Instant::now();
                if let Some(place) = *this.place {
                    this.shared.delays.record(place, now - sent, now);
                }
                return Poll::Ready(result);
            }
            match this.second.as_mut().project() {
                // Sent: it goes on, and whichever finishes last is returned.
                SecondProj::Running { .. } => {}
                // About to go (delay passed, budget taken): as a retry.
                SecondProj::Firing { backup } if verdict == Verdict::Failure => {
                    backup.after_failure = true
                }
                // About to go, but the backend shed the call: not sent
                // during an overload (the drop gives its budget back).
                SecondProj::Firing { .. } => {
                    tracing::debug!("hedge: the first attempt was shed; no backup");
                    return Poll::Ready(result);
                }
                // Waiting for its delay: sent now instead, if the gate and
                // the budget allow and another backend may answer better.
                SecondProj::Parked { .. } | SecondProj::Sleeping { .. }
                    if verdict == Verdict::Failure && worth_a_backup(&result) =>
                {
                    if !this.shared.may_hedge(Instant::now()) {
                        // Counted suppressed.
                        this.second.set(Second::Done);
                        return Poll::Ready(result);
                    }
                    let mut backup = match this.second.as_mut().project_replace(Second::Done) {
                        SecondReplace::Parked { backup } => backup,
                        SecondReplace::Sleeping { backup, .. } => backup,
                        _ => return Poll::Ready(result),
                    };
                    backup.after_failure = true;
                    Counters::add(&this.shared.counters.after_failure);
                    tracing::debug!("hedge: the first attempt failed fast; backup sent now");
                    this.second.set(Second::Firing { backup });
                }
                _ => return Poll::Ready(result),
            }
        }
        // The backup, through as many states as are ready now.
        loop {
            let second = this.second.as_mut().project();
            match second {
                SecondProj::Running { future, sent, slot } => {
                    let Poll::Ready(result) = future.poll(cx) else {
                        return Poll::Pending;
                    };
                    let result = result.map_err(Into::into);
                    let (sent, slot) = (*sent, slot.take());
                    this.second.set(Second::Done);
                    if matches!(&result, Err(e) if no_alternative(e)) {
                        // Refused before any pick: not sent after all.
                        let c = &this.shared.counters;
                        c.hedges.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                        Counters::add(&c.suppressed_no_alternative);
                        this.shared.budget.refund(Instant::now());
                        tracing::debug!("hedge suppressed: no other backend holds the model");
                        if matches!(*this.first, Attempt::Done) {
                            return Poll::Ready(result);
                        }
                        return Poll::Pending;
                    }
                    if verdict(classify, &result) != Verdict::Answer {
                        if matches!(*this.first, Attempt::Done) {
                            return Poll::Ready(result);
                        }
                        // The first attempt goes on (its waker is set).
                        return Poll::Pending;
                    }
                    let now = Instant::now();
                    Counters::add(&this.shared.counters.won);
                    tracing::debug!(after_ms = (now - sent).as_millis() as u64, "hedge won");
                    if let (Attempt::Running { .. }, Some(slot)) = (&*this.first, &slot) {
                        // Outrun: the balancer records the first attempt,
                        // dropped below, as its backend's failure.
                        slot.supersede();
                    }
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
                SecondProj::Done => {
                    if matches!(*this.first, Attempt::Done) {
                        // Only reached when polled after completion.
                        return Poll::Ready(Err("hedge: polled after completion".into()));
                    }
                    return Poll::Pending;
                }
                SecondProj::Parked { backup } => {
                    let sleep = tokio::time::sleep_until(backup.deadline);
                    let SecondReplace::Parked { backup } =
                        this.second.as_mut().project_replace(Second::Done)
                    else {
                        return Poll::Pending;
                    };
                    this.second.set(Second::Sleeping { backup, sleep });
                }
                SecondProj::Sleeping { sleep, .. } => {
                    ready!(sleep.poll(cx));
                    let SecondReplace::Sleeping { backup, .. } =
                        this.second.as_mut().project_replace(Second::Done)
                    else {
                        return Poll::Pending;
                    };
                    if !this.shared.may_hedge(Instant::now()) {
                        // Suppressed: the first attempt goes on alone.
                        return Poll::Pending;
                    }
                    this.second.set(Second::Firing { backup });
                }
                SecondProj::Firing { backup } => {
                    if let Err(error) = ready!(backup.service.poll_ready(cx)) {
                        let error: BoxError = error.into();
                        tracing::debug!(%error, "hedge: backup not ready");
                        this.shared.budget.refund(Instant::now());
                        Counters::add(&this.shared.counters.unready);
                        this.second.set(Second::Done);
                        if matches!(*this.first, Attempt::Done) {
                            // Sent after the first failed: its error is all.
                            return Poll::Ready(Err(error));
                        }
                        // The backup cannot be sent: the first attempt goes on.
                        return Poll::Pending;
                    }
                    let SecondReplace::Firing {
                        backup:
                            Backup {
                                mut service,
                                mut request,
                                slot,
                                after_failure,
                                ..
                            },
                    } = this.second.as_mut().project_replace(Second::Done)
                    else {
                        return Poll::Pending;
                    };
                    let picked = slot.as_ref().and_then(PickedSlot::get);
                    if let (Some(picked), Some(extensions)) = (picked, request.extensions_mut()) {
                        extensions.insert(match after_failure {
                            true => Exclude::strict(picked.clone()),
                            false => Exclude::new(picked.clone()),
                        });
                    }
                    Counters::add(&this.shared.counters.hedges);
                    tracing::debug!(exclude = ?picked.map(|b| b.as_str()), "hedge sent");
                    let future = service.call(request);
                    this.second.set(Second::Running {
                        future,
                        sent: Instant::now(),
                        slot,
                    });
                }
            }
        }
    }
}
