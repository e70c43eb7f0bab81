//! The balancer's response body: [`CompletionBody`] recording to the
//! request's [`Guard`].

use crate::balance::completion::guard::Guard;
use crate::classify::body::{Complete, CompletionBody};
use crate::classify::{Classified, ClassifierEos, Outcome};

/// The head's verdict: an outcome, or gRPC's status still to come in the
/// trailers.
pub(crate) type Verdict = Classified<ClassifierEos>;

/// The end of a response records the outcome its head gave (or, for gRPC
/// without a status in the head, its trailers give), unless the body
/// fails. Recorded when the body ends, fails or is dropped — a response
/// whose head decided is an outcome even if the caller never reads its
/// body (a 503 must count whether or not it is read).
impl Complete for Guard {
    fn event_stream(&mut self) {
        self.events();
    }

    fn frame(&mut self, chunks: u32) {
        self.frame(chunks);
    }

    fn ended(&mut self) {
        self.ended();
    }

    fn complete(self, outcome: Outcome) {
        self.finish(outcome);
    }
}

/// Response body returned by the balancer: the backend's body, unchanged,
/// with the request's completion recorded when it ends: its last frame
/// (under [`Classifier::grpc`](crate::classify::Classifier::grpc), the
/// trailers' `grpc-status` decides when the head had none), or an
/// error (a failure whatever the status), or its drop (the status
/// decides: 5xx fail, 429 is an overload, other 4xx are ignored, the
/// rest succeed; a gRPC status still to come is ignored). Until then
/// the request counts as in flight. [`CompletionBody::get_ref`] and
/// [`CompletionBody::into_inner`] reach the backend's body.
pub type ResponseBody<B> = CompletionBody<B, ClassifierEos, Guard>;
