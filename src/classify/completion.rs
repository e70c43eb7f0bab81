//! How a middleware hands a response on with its outcome still to record
//! (in the manner of tower's `load::TrackCompletion`): in its body, to
//! record at the body's end ([`AtEndOfBody`]), or at once
//! ([`AtResponse`]). One mechanism for the breaker (its permit's record)
//! and the balancer (its guard); what each reads of the head before is
//! its own.

use http_body::Body;

use super::body::{at_end, Complete, CompletionBody};
use super::record::{AtEndOfBody, AtResponse};
use super::sse::is_event_stream;
use super::traits::{Classified, ClassifyEos};

pub(crate) use self::sealed::TrackCompletion;

mod sealed {
    use crate::classify::traits::Classified;

    /// Hands a response `T` on, its outcome — the head's `Eos` verdict —
    /// recorded by the receiver `R`: the two recording points of the
    /// breaker and the balancer. Implemented inside the crate only.
    #[diagnostic::on_unimplemented(
        message = "the outcome of a `{T}` cannot be recorded at the end of its body",
        label = "records at the end of an `http::Response<B>` body, with `B: http_body::Body`",
        note = "for any other response (`http::Response<Bytes>`, `http::Response<()>`, `reqwest::Response`, a non-HTTP reply) record when it arrives: `CircuitBreakerLayer::at_response()`, `ModelBalancer::at_response(classifier)`"
    )]
    pub trait TrackCompletion<T, Eos, R> {
        /// What the middleware returns.
        type Output;

        /// `response`, whose head gave `verdict`, with `receiver` to
        /// record its outcome.
        fn track_completion(
            &self,
            response: T,
            receiver: R,
            verdict: Classified<Eos>,
        ) -> Self::Output;
    }
}

/// The body wrapped: the outcome is recorded when it ends, fails or is
/// dropped; an event stream's receiver is told first.
impl<B, Eos, R> TrackCompletion<http::Response<B>, Eos, R> for AtEndOfBody
where
    B: Body,
    Eos: ClassifyEos,
    R: Complete,
{
    type Output = http::Response<CompletionBody<B, Eos, R>>;

    fn track_completion(
        &self,
        response: http::Response<B>,
        mut receiver: R,
        verdict: Classified<Eos>,
    ) -> Self::Output {
        let events = is_event_stream(response.headers());
        if events {
            receiver.event_stream();
        }
        response.map(|body| CompletionBody::new(body, receiver, verdict, events))
    }
}

/// Recorded now; a verdict deferred to the trailers reads none.
impl<T, Eos: ClassifyEos, R: Complete, C> TrackCompletion<T, Eos, R> for AtResponse<C> {
    type Output = T;

    fn track_completion(&self, response: T, receiver: R, verdict: Classified<Eos>) -> T {
        receiver.complete(at_end(verdict, None));
        response
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::*;
    use crate::classify::{Classify, GrpcErrorsAsFailures, Outcome};

    /// What a receiver was told, in order.
    #[derive(Debug, Default, Clone)]
    struct Log(Rc<RefCell<Vec<String>>>);

    impl Complete for Log {
        fn event_stream(&mut self) {
            self.0.borrow_mut().push("events".into());
        }

        fn complete(self, outcome: Outcome) {
            self.0.borrow_mut().push(format!("{outcome:?}"));
        }
    }

    fn told(log: &Log) -> Vec<String> {
        log.0.borrow().clone()
    }

    #[test]
    fn at_response_records_at_once_and_a_deferred_verdict_reads_no_trailers() {
        let log = Log::default();
        let grpc = GrpcErrorsAsFailures::new();
        let deferred = Classify::<_, ()>::classify_response(&grpc, &http::Response::new(()));
        assert!(
            matches!(deferred, Classified::AtEnd(_)),
            "a 200 without grpc-status"
        );
        let rsp = AtResponse::new(()).track_completion(7_u8, log.clone(), deferred);
        assert_eq!(rsp, 7, "handed on unchanged");
        assert_eq!(told(&log), ["Failure"], "no trailers: no status");
    }

    #[test]
    fn at_end_of_body_wraps_the_body_and_tells_an_event_stream_first() {
        let log = Log::default();
        let rsp = http::Response::builder()
            .header("content-type", "text/event-stream")
            .body(String::from("data: x\n\n"))
            .unwrap();
        let verdict = Classified::<std::convert::Infallible>::Ready(Outcome::Failure);
        let rsp = AtEndOfBody.track_completion(rsp, log.clone(), verdict);
        assert_eq!(told(&log), ["events"], "in flight until the body ends");
        drop(rsp);
        assert_eq!(
            told(&log),
            ["events", "Failure"],
            "the head's verdict at the drop"
        );
    }
}
