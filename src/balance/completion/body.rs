//! The balancer's response body: [`CompletionBody`] recording to the
//! request's [`Guard`].

use crate::balance::completion::guard::Guard;
use crate::balance::completion::not_found::Missing;
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

    fn data(&mut self, bytes: &[u8]) {
        if let Some(peek) = self.not_found() {
            peek.data(bytes);
        }
    }

    fn ended(&mut self) {
        if let Some(peek) = self.not_found() {
            peek.end();
        }
        self.ended();
    }

    fn complete(mut self, outcome: Outcome) {
        let missing = self.not_found().map(|peek| peek.missing());
        if missing == Some(Missing::Model) {
            model_absent(&self);
        }
        self.finish(outcome);
    }
}

/// A 404 that says the model is absent (`not_found.rs`): KServe v2 and
/// OpenAI-compatible servers answer it for a model they do not hold now,
/// so it is absent there, whatever the balancer believed (served, or sent
/// there and maybe loading): the next picks see it absent. With placement
/// on, one reload starts (if the repository knows the model); without,
/// the server did not load it on demand, so for a while the backend is no
/// place to send the model cold: the picks go where it is served. A 404
/// for a version or a route, or one dropped unread, changes nothing.
#[cold]
fn model_absent(guard: &Guard) {
    let Some(key) = guard.model() else {
        return;
    };
    let state = guard.state();
    match state.placement() {
        Some(placement) => placement.not_found(state, key),
        // Nobody will load it there: a server that answers 404 rather
        // than load on demand gets the model cold no more for a while.
        None => {
            state.residency.refuse(key, state.millis_now());
        }
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
