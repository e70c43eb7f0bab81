//! The guard of one picked request: in flight until its outcome is taken
//! back.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{BackendId, PickedSlot};
use crate::balance::completion::not_found::Peek;
use crate::balance::receipt::RoutingReceipt;
#[cfg(test)]
use crate::balance::state::backend::Start;
use crate::balance::state::backend::{Admission, BackendState};
use crate::balance::state::in_flight::InFlight;
use crate::balance::state::placement::Placement;
use crate::balance::state::residency::Warmth;
use crate::breaker::BreakerState;
use crate::classify::timing::Timing;
use crate::classify::Outcome;

/// One request in flight on a picked backend, from the pick until its
/// outcome is recorded with [`Guard::finish`].
///
/// While it lives the request counts in the backend's in-flight load.
/// Finishing records the outcome in the circuit breaker that admitted the
/// request (the backend's, or in
/// [`BreakerScope::BackendModel`](crate::balance::BreakerScope::BackendModel) the
/// pair's — even if the pair has since been evicted), a failure in the
/// backend's error rate and, for a timed request's success or failure, the
/// latency since the pick in its latency estimate and its health (a
/// failure counts as at least the health policy's failure penalty, 1 s by
/// default, so failing fast does not look fast). Dropped unfinished, the
/// request counts as **cancelled**: the in-flight count drops, a half-open
/// probe permit is given back, and nothing is recorded — except that a
/// hedge's first attempt that its backup outran (its [`PickedSlot`] marked
/// superseded before it was dropped, before its response arrived) gives
/// the time it ran to the backend's latency estimate, a lower bound of
/// what it would have taken, so that P2C's cost sees a backend turning
/// slow. A lost race is **not a failure**: neither its breaker nor its
/// health counts it as one (with no fault anywhere, hedges lose races
/// every second; three in a row must not open a breaker). It is a **slow
/// call** for its breaker — it was slower than another backend for the
/// same request — which counts only toward the slow-call rate (whose
/// default threshold, 1.0, trips only when every call in the window was
/// slow), never toward
/// the failure rate or consecutive failures: a backend that hangs or
/// turns slow still trips its breaker's slow-call rate, even though the
/// hedges keep its callers from noticing. A first attempt
/// whose model was not known to be served on the backend (a cold start,
/// maybe a load in progress) gives no latency, as it is never slow.
///
/// The [`ModelBalancer`](crate::balance::ModelBalancer) service keeps one inside
/// each response body; [`ModelBalancer::pick`](crate::balance::ModelBalancer::pick)
/// hands one to callers that are not `Service`s.
#[derive(Debug)]
#[must_use = "a guard dropped at once counts the request as cancelled"]
pub struct Guard {
    /// Counted in flight on the picked backend until the guard drops.
    in_flight: InFlight,
    admission: Option<Admission>,
    /// When the request was picked, if its latency is timed.
    started: Option<Instant>,
    /// The model's hash, for inference (`inference` set): a flag beside
    /// a bare hash keeps the guard, which every response future and body
    /// carries, 8 bytes smaller than an `Option`.
    model: u64,
    inference: bool,
    /// Cold: the model was not yet known served on the backend (the first
    /// requests there, while it may be loading); its success confirms it.
    warmth: Warmth,
    /// Whether it is counted in its model's requests in flight on the
    /// backend (placement on: see [`Residency::enter`]).
    ///
    /// [`Residency::enter`]: crate::balance::state::residency::Residency::enter
    counted: bool,
    /// A hedging layer's slot of the request, until its response arrives:
    /// superseded, the time it ran feeds the latency estimate when dropped.
    slot: Option<PickedSlot>,
    /// When its head and frames came (timed requests).
    timing: Timing,
    /// Its answer is an event stream: each frame is timed (TPOT).
    events: bool,
    /// Why it went there, with receipts on.
    receipt: Option<Box<RoutingReceipt>>,
    /// Its answer's body, once the head said 404 (inference only): what
    /// is missing is read when it ends.
    not_found: Option<Box<Peek>>,
}

impl Guard {
    /// The guard of a request started as `in_flight`, holding the
    /// breaker's `admission`. `started`: the pick's time, for a request
    /// whose latency is timed; `model`: an inference request's model;
    /// `warmth`: whether the model was known served on the backend when it
    /// was picked; `receipt`: why it went there, with receipts on.
    #[inline]
    pub(crate) fn new(
        in_flight: InFlight,
        admission: Admission,
        started: Option<Instant>,
        model: Option<u64>,
        warmth: Warmth,
        receipt: Option<RoutingReceipt>,
    ) -> Self {
        Self {
            in_flight,
            admission: Some(admission),
            started,
            model: model.unwrap_or(0),
            inference: model.is_some(),
            warmth,
            counted: false,
            slot: None,
            timing: Timing::default(),
            events: false,
            receipt: receipt.map(Box::new),
            not_found: None,
        }
    }

    /// Why and where the request was routed, with
    /// [`BalanceConfigBuilder::receipts`](crate::balance::BalanceConfigBuilder::receipts)
    /// on; else `None`.
    pub fn receipt(&self) -> Option<&RoutingReceipt> {
        self.receipt.as_deref()
    }

    /// The receipt, taken (into a response's extensions).
    #[inline]
    pub(crate) fn take_receipt(&mut self) -> Option<RoutingReceipt> {
        self.receipt.take().map(|r| *r)
    }

    /// Watches `slot`: if a hedge marks it superseded while the request
    /// waits for its response, dropping the guard records the time it ran
    /// in the latency estimate (not a failure).
    pub(crate) fn watch_slot(&mut self, slot: &PickedSlot) {
        self.slot = Some(slot.clone());
    }

    /// The response arrived: a hedge can no longer supersede the request
    /// (and the hedging layer may reuse its slot).
    #[inline]
    pub(crate) fn answered(&mut self) {
        self.slot = None;
        self.state().health.answered();
        if let Some(started) = self.started {
            let stop = self.state().settings().stop_point;
            self.timing.head(stop, started, Instant::now);
        }
    }

    /// The answer is an event stream (its head says `text/event-stream`):
    /// its TTFT and TPOT are recorded.
    pub(crate) fn events(&mut self) {
        self.events = true;
    }

    /// A frame of the answer's body came with `chunks` of it (an event
    /// stream's `data:` events): timed (one clock read) if the request is,
    /// and it is the first or the answer is an event stream.
    pub(crate) fn frame(&mut self, chunks: u32) {
        let Some(started) = self.started else {
            return;
        };
        let stop = self.state().settings().stop_point;
        self.timing
            .frame(stop, self.events, started, Instant::now, chunks);
    }

    /// The answer's body ended (not dropped): a stream's TTFT and TPOT
    /// count only then.
    pub(crate) fn ended(&mut self) {
        self.timing.ended();
    }

    /// The answer is a 404: its body's first bytes are kept, to read what
    /// it says is missing when it ends (`not_found.rs`).
    pub(crate) fn watch_not_found(&mut self) {
        if self.inference {
            self.not_found = Some(Box::default());
        }
    }

    /// The 404's body so far, while watched.
    pub(crate) fn not_found(&mut self) -> Option<&mut Peek> {
        self.not_found.as_deref_mut()
    }

    /// With placement on, counts the request in its model's requests in
    /// flight on the backend (a model with requests in flight is never
    /// unloaded to make room), and returns the placement.
    #[inline]
    pub(crate) fn placement(&mut self) -> Option<Arc<Placement>> {
        let placement = self.in_flight.state().placement()?;
        if let (Some(key), false) = (self.model(), self.counted) {
            self.counted = self.in_flight.state().residency.enter(key);
        }
        Some(placement.clone())
    }

    /// Whether the breaker that admitted the request (the backend's, or
    /// the pair's in `BackendModel` scope) is half-open now; false in
    /// panic mode, where no breaker was asked. Takes that breaker's lock.
    pub(crate) fn admitted_half_open(&self) -> bool {
        let state = match &self.admission {
            Some(Admission::Backend(_)) => self.state().breaker.state(),
            Some(Admission::Pair(breaker, _)) => breaker.state(),
            Some(Admission::Bypass) | None => return false,
        };
        state == BreakerState::HalfOpen
    }

    /// The picked backend's state.
    pub(crate) fn state(&self) -> &Arc<BackendState> {
        self.in_flight.state()
    }

    /// Whether the request's model was not known to be served on the
    /// backend when it was picked (inference only).
    pub(crate) fn is_cold(&self) -> bool {
        self.warmth == Warmth::Cold
    }

    /// An inference request's model hash.
    pub(crate) fn model(&self) -> Option<u64> {
        self.inference.then_some(self.model)
    }

    /// The picked backend.
    pub fn backend(&self) -> &BackendId {
        &self.state().id
    }

    /// When the request was picked (Tokio's clock). Always set on guards
    /// from [`ModelBalancer::pick`](crate::balance::ModelBalancer::pick); `None` on
    /// the `Service` path's requests outside the latency sample.
    ///
    /// A hook of the crate's own tests, benches and simulator (feature
    /// `testing`): not part of the public API.
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub fn started(&self) -> Option<Instant> {
        self.started
    }

    /// Records the request's outcome now.
    ///
    /// Guards from [`ModelBalancer::pick`](crate::balance::ModelBalancer::pick)
    /// always record the latency; the `Service` path times a sample of a
    /// clone's requests (every request while the clone's traffic is
    /// light, down to one in 16 while it is heavy), sparing two clock
    /// reads on the others. Every outcome reaches the breaker, and every
    /// failure the backend's error rate; a latency (a failure's at least
    /// the failure penalty) only from a timed request, so that the
    /// latency estimates see successes and failures in their true
    /// proportion.
    #[inline]
    pub fn finish(mut self, outcome: Outcome) {
        if self.started.is_some() {
            self.complete(outcome, Instant::now());
        } else {
            self.untimed(outcome);
        }
    }

    /// Records the request's outcome at `now`; its latency is `now` minus
    /// when it was picked (0 if `now` is earlier; an untimed request has
    /// none, and its failure counts in the error rate only). A timed call
    /// is slow for the breaker if its latency reaches the policy's
    /// slow-call duration, unless its model was not known to be served on
    /// the backend when picked (a cold start: never slow).
    ///
    /// A hook of the crate's own tests, benches and simulator (feature
    /// `testing`): not part of the public API.
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub fn finish_at(mut self, outcome: Outcome, now: Instant) {
        self.complete(outcome, now);
    }

    /// A success is a sign of life for health's silence rule; a failure
    /// is not (a timeout or a reset is what a stopped server gives), and
    /// an answered one was counted when its head arrived
    /// ([`Guard::answered`]).
    fn alive(&self, outcome: Outcome) {
        if matches!(outcome, Outcome::Success | Outcome::Ignored) {
            self.state().health.answered();
        }
    }

    /// Records `outcome` at `now`, for a guard finished or dropped.
    fn complete(&mut self, outcome: Outcome, now: Instant) {
        self.alive(outcome);
        let total = self
            .started
            .map(|started| now.saturating_duration_since(started));
        // Up to the stop point (the first frame, by default): the latency
        // the breaker, health, the estimate and the limit judge.
        let stop = self.state().settings().stop_point;
        let elapsed = total.map(|total| self.timing.latency(stop, total));
        let latency = elapsed.unwrap_or(Duration::ZERO);
        let penalty = self.state().settings().health.failure_penalty;
        match outcome {
            Outcome::Success if self.started.is_some() => {
                self.state().latency.record(latency, outcome);
                // What the caller saw, cold starts included.
                if let (true, Some((ttft, tpot))) = (self.events, self.timing.ended_stream()) {
                    self.state().stream.record(ttft, tpot);
                    #[cfg(feature = "metrics")]
                    crate::balance::state::stream::export(&self.state().id, ttft, tpot);
                }
                // A request that may have waited for its model to load
                // says nothing of the backend's health: cold loads are
                // expected, and the balancer chose them.
                if self.warmth == Warmth::Warm {
                    self.state().health.record(elapsed, outcome, penalty);
                    // A warm inference request: its model's work.
                    if let Some(key) = self.model() {
                        self.state()
                            .fleet
                            .work
                            .record(key, total.unwrap_or_default());
                    }
                }
            }
            Outcome::Failure | Outcome::Overload => {
                if self.started.is_some() {
                    self.state().latency.record(latency, outcome);
                }
                self.state().health.record(elapsed, outcome, penalty);
            }
            // An untimed success has no latency; the caller's error says
            // nothing of the backend's speed.
            _ => {}
        }
        // An adaptive admission limit learns from the timed requests.
        if elapsed.is_some() {
            self.state().learn_limit(outcome, latency);
        }
        // A cold start is slow by nature: the breaker does not judge its
        // time (a 30 s model load is not a slow call).
        let elapsed = elapsed.filter(|_| self.warmth == Warmth::Warm);
        self.record(outcome, elapsed, Some(now));
    }

    /// Records the outcome of a request that was not timed: a failure
    /// counts in the error rate; the breaker reads the clock only if its
    /// state can change.
    fn untimed(&mut self, outcome: Outcome) {
        self.alive(outcome);
        if matches!(outcome, Outcome::Failure | Outcome::Overload) {
            let penalty = self.state().settings().health.failure_penalty;
            self.state().health.record(None, outcome, penalty);
        }
        self.record(outcome, None, None);
    }

    /// Gives the outcome to the breaker in scope; without `now`, the clock
    /// is read only if the breaker's state can change.
    fn record(&mut self, outcome: Outcome, elapsed: Option<Duration>, now: Option<Instant>) {
        if let (Outcome::Success, Some(key), Warmth::Cold) = (outcome, self.model(), self.warmth) {
            self.state().residency.confirm(key);
        }
        let now = || now.unwrap_or_else(Instant::now);
        match self.admission.take() {
            Some(Admission::Backend(ticket)) => {
                self.in_flight
                    .state()
                    .breaker
                    .record_ticket_with(ticket, outcome, elapsed, now);
            }
            Some(Admission::Pair(breaker, ticket)) => {
                breaker.record_ticket_at(ticket, outcome, elapsed, now());
            }
            Some(Admission::Bypass) | None => {}
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let superseded = self.slot.take().is_some_and(|slot| slot.is_superseded());
        if let (true, Some(started), Warmth::Warm) = (superseded, self.started, self.warmth) {
            // Outrun by a backup: it ran at least this long.
            let now = Instant::now();
            let ran = now.saturating_duration_since(started);
            self.state().latency.record(ran, Outcome::Success);
            // Outrun: a slow call for the breaker, never a failure.
            let slow = self.state().breaker.config().slow_call_duration();
            self.record(Outcome::Success, Some(ran.max(slow)), Some(now));
        }
        match self.admission.take() {
            Some(Admission::Backend(ticket)) => self.state().breaker.release_ticket(ticket),
            Some(Admission::Pair(breaker, ticket)) => breaker.release_ticket(ticket),
            Some(Admission::Bypass) | None => {}
        }
        if let (true, Some(key)) = (self.counted, self.model()) {
            self.state().residency.leave(key);
        }
        // `in_flight`, dropped next, counts the request out of the
        // backend's and the fleet's load.
    }
}

#[cfg(test)]
mod tests;
