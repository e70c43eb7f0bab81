//! What the balancer reads of a backend's answer before handing it on
//! through [`TrackCompletion`], the mechanism it shares with the breaker:
//! an HTTP response's head, classified by the balancer's classifier, to
//! record at the end of its body ([`AtEndOfBody`]), or any response,
//! classified by the one given, to record when it arrives
//! ([`AtResponse`]).

use http::{HeaderMap, StatusCode};
use http_body::Body;

use crate::balance::completion::body::{ResponseBody, Verdict};
use crate::balance::completion::guard::Guard;
use crate::balance::config::fields::ResidencyHeader;
use crate::classify::completion::TrackCompletion;
use crate::classify::{AtEndOfBody, AtResponse, Classified, Classify, Outcome};
use crate::placement::WaitedForLoad;
use crate::route::ModelId;

pub(crate) use self::sealed::{Finish, Sent};

mod sealed {
    use crate::balance::completion::guard::Guard;

    /// When a request was sent to its backend: with placement on, one
    /// picked where its model was not served may wait for its load first
    /// (its answer then carries
    /// [`WaitedForLoad`](crate::placement::WaitedForLoad)).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Sent {
        /// At once: its model served there (or loading without it).
        AtOnce,
        /// After its model's load there: a cold start.
        AfterLoad,
    }

    /// Reads a backend's answer `T` (or its error `E`) and hands it on,
    /// its outcome recorded to the request's guard. Implemented inside the
    /// crate only.
    #[diagnostic::on_unimplemented(
        message = "the balancer cannot record the outcome of a `{T}` at the end of its body",
        label = "records at the end of an `http::Response<B>` body, with `B: http_body::Body`",
        note = "for any other response (`http::Response<Bytes>`, `reqwest::Response`, a non-HTTP reply) classify it when it arrives: `ModelBalancer::at_response(classifier)`"
    )]
    pub trait Finish<T, E> {
        /// What the balancer returns.
        type Output;

        /// The answer; `sent` says whether the request waited for its
        /// model's load.
        fn response(&self, response: T, guard: Guard, sent: Sent) -> Self::Output;

        /// The endpoint's error.
        fn error(&self, error: &E, guard: Guard);
    }
}

impl<B: Body, E> Finish<http::Response<B>, E> for AtEndOfBody {
    type Output = http::Response<ResponseBody<B>>;

    fn response(
        &self,
        mut response: http::Response<B>,
        mut guard: Guard,
        sent: Sent,
    ) -> Self::Output {
        guard.answered();
        if sent == Sent::AfterLoad {
            response.extensions_mut().insert(WaitedForLoad);
        }
        if let Some(receipt) = guard.take_receipt() {
            response.extensions_mut().insert(receipt);
        }
        if response.status() == StatusCode::NOT_FOUND {
            // Read when its body ends: what it says is missing.
            guard.watch_not_found();
        }
        read_residency(&guard, response.headers());
        let classifier = &guard.state().settings().classifier;
        let verdict = classifier.classify_head(response.status(), response.headers());
        let verdict = answered(&guard, response.status(), verdict);
        self.track_completion(response, guard, verdict)
    }

    fn error(&self, _: &E, guard: Guard) {
        guard.finish(Outcome::Failure);
    }
}

impl<T, E, C: Classify<T, E>> Finish<T, E> for AtResponse<C> {
    type Output = T;

    fn response(&self, response: T, mut guard: Guard, _: Sent) -> T {
        guard.answered();
        let verdict = self.classifier.classify_response(&response);
        self.track_completion(response, guard, verdict)
    }

    fn error(&self, error: &E, guard: Guard) {
        guard.finish(self.classifier.classify_error(error));
    }
}

/// Learns residency from the response's headers, if the balancer is
/// configured with a [`ResidencyHeader`].
#[inline]
pub(crate) fn read_residency(guard: &Guard, headers: &HeaderMap) {
    if let Some(header) = &guard.state().settings().residency_header {
        read_residency_header(guard, header, headers);
    }
}

/// [`read_residency`] with a header configured (out of line).
fn read_residency_header(guard: &Guard, header: &ResidencyHeader, headers: &HeaderMap) {
    let state = guard.state();
    let residency = &state.residency;
    match header {
        ResidencyHeader::ResidentModels(name) => {
            let Some(list) = headers.get(name).and_then(|v| v.to_str().ok()) else {
                return;
            };
            let keys = list.split(',').map(str::trim).filter_map(ModelId::hash_of);
            residency.sync(keys, state.millis_now());
        }
        ResidencyHeader::ColdLoad(name) => {
            // Loaded now or resident before: resident and served.
            if let (Some(key), true) = (guard.model(), headers.contains_key(name)) {
                residency.touch(key, state.millis_now());
                residency.confirm(key);
            }
        }
    }
}

/// The breaker's verdict on an answer: a 4xx other than 429 says nothing
/// of the backend's health (the classifier ignores it), but it proves the
/// backend answers. A half-open breaker takes it as its probe's success:
/// else a server restarted without its models, answering 404 to every
/// probe, would keep its breaker half-open, reopening at each round's
/// timeout, for as long as nobody loads them.
#[inline]
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
