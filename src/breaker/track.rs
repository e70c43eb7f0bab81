//! How the breaker hands a response on with its outcome to record: in its
//! body, to record at the body's end ([`AtEndOfBody`]), or at once
//! ([`AtResponse`]).

use http_body::Body;

use super::body::{Record, ResponseBody};
use crate::classify::body::{at_end, Complete};
use crate::classify::sse::is_event_stream;
use crate::classify::{AtEndOfBody, AtResponse, Classified, ClassifyEos};

pub(crate) use self::sealed::Track;

mod sealed {
    use super::Record;
    use crate::classify::Classified;

    /// Hands a response `T` on, its outcome recorded by `record`: the
    /// breaker's two recording points. Implemented inside the crate only.
    #[diagnostic::on_unimplemented(
        message = "the circuit breaker cannot record the outcome of a `{T}` at the end of its body",
        label = "records at the end of an `http::Response<B>` body, with `B: http_body::Body`",
        note = "for any other response (`http::Response<Bytes>`, `http::Response<()>`, `reqwest::Response`, a non-HTTP reply) record when it arrives: `CircuitBreakerLayer::at_response()`"
    )]
    pub trait Track<T, Eos> {
        /// What the breaker returns.
        type Output;

        /// `response`, whose head gave `verdict`, with `record` to record
        /// its outcome.
        fn track(&self, response: T, record: Record, verdict: Classified<Eos>) -> Self::Output;
    }
}

impl<B: Body, Eos: ClassifyEos> Track<http::Response<B>, Eos> for AtEndOfBody {
    type Output = http::Response<ResponseBody<B, Eos>>;

    fn track(
        &self,
        response: http::Response<B>,
        record: Record,
        verdict: Classified<Eos>,
    ) -> Self::Output {
        let events = is_event_stream(response.headers());
        response.map(|body| ResponseBody::new(body, record, verdict, events))
    }
}

impl<T, Eos: ClassifyEos> Track<T, Eos> for AtResponse {
    type Output = T;

    fn track(&self, response: T, record: Record, verdict: Classified<Eos>) -> T {
        record.complete(at_end(verdict, None));
        response
    }
}
