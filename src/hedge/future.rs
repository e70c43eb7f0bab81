//! The hedged response future ([`Hedge`](super::Hedge)'s, named as tower
//! names a middleware's future: `hedge::future::ResponseFuture`); its
//! `poll` drives the first attempt, then the backup, one named step a
//! decision.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};
use tower_service::Service;

use super::delay::Place;
use super::refusal::no_alternative;
use super::request::{Backup, CloneRequest};
use super::shared::{Counters, Shared};
use super::verdict::{verdict, worth_a_backup, Verdict};
use crate::backend::{Exclude, PickedSlot};
use crate::classify::Classify;
use crate::error::{BoxError, NotReady};

pin_project! {
    #[project = AttemptProj]
    enum Attempt<F> {
        Running { #[pin] future: F, sent: Instant },
        // Called before `poll_ready`: never sent; fails with `NotReady`.
        Unready,
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
    #[project = ResponseFutureProj]
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
    /// once. Dropping it drops every attempt. Called without `poll_ready`,
    /// it resolves to [`NotReady`], nothing sent.
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

    /// A call made without `poll_ready`: fails with [`NotReady`].
    pub(crate) fn not_ready(shared: Arc<Shared>, classify: C) -> Self {
        let (first, second, place) = (Attempt::Unready, Second::Done, None);
        Self {
            first,
            second,
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
        if let AttemptProj::Unready = this.first.as_mut().project() {
            this.first.set(Attempt::Done);
            return Poll::Ready(Err(NotReady.into()));
        }
        // The first attempt, polled once per call.
        if let Some((result, sent)) = poll_attempt(this.first.as_mut(), cx) {
            if let Some(result) = this.first_done(result, sent) {
                return Poll::Ready(result);
            }
        }
        // The backup, through as many states as are ready now.
        loop {
            match this.second.as_mut().project() {
                SecondProj::Parked { .. } | SecondProj::Sleeping { .. } => {
                    ready!(this.wait_for_delay(cx));
                }
                SecondProj::Firing { backup } => {
                    if let Err(error) = ready!(backup.service.poll_ready(cx)) {
                        return this.backup_unready(error.into());
                    }
                    ready!(this.send_backup());
                }
                SecondProj::Running { future, sent, slot } => {
                    let result = ready!(future.poll(cx)).map_err(Into::into);
                    let (sent, slot) = (*sent, slot.take());
                    this.second.set(Second::Done);
                    return this.backup_done(result, sent, slot);
                }
                SecondProj::Done => return this.no_backup(),
            }
        }
    }
}

// === the steps of `poll` ===

/// What the race resolves to: an attempt's result.
type Settled<S, Req> = Result<<S as Service<Req>>::Response, BoxError>;

impl<S, Req, C> ResponseFutureProj<'_, S, Req, C>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    Req: CloneRequest,
    C: Classify<S::Response, BoxError>,
{
    /// The first attempt finished with `result` (sent at `sent`). An
    /// answer wins: its latency is recorded and the backup, if any, is
    /// dropped (cancelled). A failure or an overload waits for a backup
    /// already sent; one about to go goes as a retry after a failure, and
    /// not at all after an overload (the drop gives its budget back); one
    /// waiting for its delay goes now after a failure worth it
    /// ([`Self::retry_now`]). `None`: the race goes on; else the result.
    fn first_done(&mut self, result: Settled<S, Req>, sent: Instant) -> Option<Settled<S, Req>> {
        let verdict = verdict(&*self.classify, &result);
        if verdict == Verdict::Answer {
            let now = Instant::now();
            if let Some(place) = *self.place {
                self.shared.delays.record(place, now - sent, now);
            }
            return Some(result);
        }
        match self.second.as_mut().project() {
            // Sent: it goes on, and whichever finishes last is returned.
            SecondProj::Running { .. } => None,
            // About to go (delay passed, budget taken): as a retry.
            SecondProj::Firing { backup } if verdict == Verdict::Failure => {
                backup.after_failure = true;
                None
            }
            // About to go, but the backend shed the call: not sent
            // during an overload.
            SecondProj::Firing { .. } => {
                tracing::debug!("hedge: the first attempt was shed; no backup");
                Some(result)
            }
            SecondProj::Parked { .. } | SecondProj::Sleeping { .. }
                if verdict == Verdict::Failure && worth_a_backup(&result) =>
            {
                self.retry_now(result)
            }
            _ => Some(result),
        }
    }

    /// A first attempt that failed while its backup waited for its delay:
    /// the backup is sent now instead, as a retry, if the gate and the
    /// budget allow and another backend may answer better; else (counted
    /// suppressed) the failure is the result.
    fn retry_now(&mut self, result: Settled<S, Req>) -> Option<Settled<S, Req>> {
        if !self.shared.may_hedge(Instant::now()) {
            // Counted suppressed.
            self.second.set(Second::Done);
            return Some(result);
        }
        let mut backup = match self.second.as_mut().project_replace(Second::Done) {
            SecondReplace::Parked { backup } => backup,
            SecondReplace::Sleeping { backup, .. } => backup,
            _ => return Some(result),
        };
        backup.after_failure = true;
        Counters::add(&self.shared.counters.after_failure);
        tracing::debug!("hedge: the first attempt failed fast; backup sent now");
        self.second.set(Second::Firing { backup });
        None
    }

    /// The backup parked or sleeping: its timer starts (on the first poll
    /// that finds the first attempt pending, so an answer ready at once
    /// costs no timer); once it fires, the backup is due, and goes if the
    /// gate and the budget allow. Pending: not yet due, or suppressed (the
    /// first attempt goes on alone).
    fn wait_for_delay(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let SecondProj::Parked { backup } = self.second.as_mut().project() {
            let sleep = tokio::time::sleep_until(backup.deadline);
            let SecondReplace::Parked { backup } =
                self.second.as_mut().project_replace(Second::Done)
            else {
                return Poll::Pending;
            };
            self.second.set(Second::Sleeping { backup, sleep });
        }
        let SecondProj::Sleeping { sleep, .. } = self.second.as_mut().project() else {
            return Poll::Pending;
        };
        ready!(sleep.poll(cx));
        let SecondReplace::Sleeping { backup, .. } =
            self.second.as_mut().project_replace(Second::Done)
        else {
            return Poll::Pending;
        };
        if !self.shared.may_hedge(Instant::now()) {
            // Suppressed: the first attempt goes on alone.
            return Poll::Pending;
        }
        self.second.set(Second::Firing { backup });
        Poll::Ready(())
    }

    /// The backup's service failed its readiness: the budget given back,
    /// counted, the backup dropped.
    fn backup_unready(&mut self, error: BoxError) -> Poll<Settled<S, Req>> {
        tracing::debug!(%error, "hedge: backup not ready");
        self.shared.budget.refund(Instant::now());
        Counters::add(&self.shared.counters.unready);
        self.second.set(Second::Done);
        // Sent after the first failed: its error is all. Else the backup
        // cannot be sent: the first attempt goes on.
        self.last_or_pending(Err(error))
    }

    /// The backup's service is ready: the backup is sent, the first
    /// attempt's backend excluded (strictly for a retry).
    fn send_backup(&mut self) -> Poll<()> {
        let SecondReplace::Firing {
            backup:
                Backup {
                    mut service,
                    mut request,
                    slot,
                    after_failure,
                    ..
                },
        } = self.second.as_mut().project_replace(Second::Done)
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
        Counters::add(&self.shared.counters.hedges);
        tracing::debug!(exclude = ?picked.map(|b| b.as_str()), "hedge sent");
        let future = service.call(request);
        self.second.set(Second::Running {
            future,
            sent: Instant::now(),
            slot,
        });
        Poll::Ready(())
    }

    /// The backup finished with `result` (sent at `sent`, with the first
    /// attempt's `slot`): refused before any pick, it was not sent after
    /// all; a failure or an overload is the result if the first attempt
    /// ended too, else the first goes on; an answer wins
    /// ([`Self::backup_won`]).
    fn backup_done(
        &mut self,
        result: Settled<S, Req>,
        sent: Instant,
        slot: Option<PickedSlot>,
    ) -> Poll<Settled<S, Req>> {
        if matches!(&result, Err(e) if no_alternative(e)) {
            // Refused before any pick: not sent after all.
            let c = &self.shared.counters;
            c.hedges.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            Counters::add(&c.suppressed_no_alternative);
            self.shared.budget.refund(Instant::now());
            tracing::debug!("hedge suppressed: no other backend holds the model");
            return self.last_or_pending(result);
        }
        if verdict(&*self.classify, &result) != Verdict::Answer {
            return self.last_or_pending(result);
        }
        self.backup_won(sent, slot);
        Poll::Ready(result)
    }

    /// The backup answered first: counted a win, its latency recorded,
    /// and the first attempt, if still running, superseded and dropped.
    fn backup_won(&mut self, sent: Instant, slot: Option<PickedSlot>) {
        let now = Instant::now();
        Counters::add(&self.shared.counters.won);
        tracing::debug!(after_ms = (now - sent).as_millis() as u64, "hedge won");
        if let (Attempt::Running { .. }, Some(slot)) = (&*self.first, &slot) {
            // Outrun: the balancer records the first attempt, dropped
            // below, as its backend's failure.
            slot.supersede();
        }
        if let Some(place) = *self.place {
            let delays = &self.shared.delays;
            delays.record(place, now - sent, now);
            // The superseded first attempt: how long it ran, a lower
            // bound of its latency, so that the slow answers hedging cuts
            // short still count.
            if let AttemptProj::Running { sent, .. } = self.first.as_mut().project() {
                delays.record(place, now - *sent, now);
            }
        }
        self.first.set(Attempt::Done);
    }

    /// No backup to drive: the first attempt goes on (its waker is set).
    fn no_backup(&self) -> Poll<Settled<S, Req>> {
        if matches!(*self.first, Attempt::Done) {
            // Only reached when polled after completion.
            return Poll::Ready(Err("hedge: polled after completion".into()));
        }
        Poll::Pending
    }

    /// `result`, the last attempt's, if the first attempt ended; else
    /// pending while the first goes on (its waker is set).
    fn last_or_pending(&self, result: Settled<S, Req>) -> Poll<Settled<S, Req>> {
        if matches!(*self.first, Attempt::Done) {
            return Poll::Ready(result);
        }
        Poll::Pending
    }
}
