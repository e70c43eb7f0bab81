//! gRPC: the status is in `grpc-status`, in the headers of a trailers-only
//! response or else in the trailers at the end of an HTTP 200's body.

use super::outcome::Outcome;
use super::status::ServerErrorsAsFailures;
use super::traits::{Classified, Classify, ClassifyEos};

/// The classifier for gRPC responses (in the manner of tower-http's
/// `GrpcErrorsAsFailures`).
///
/// An HTTP status other than 200 is classified as for HTTP
/// ([`ServerErrorsAsFailures`]). For a 200, `grpc-status` decides: in the
/// headers of a trailers-only response (decided at once), else in the
/// trailers at the end of the body.
///
/// | `grpc-status` | outcome |
/// |---|---|
/// | 0 `OK` | [`Outcome::Success`] |
/// | 8 `RESOURCE_EXHAUSTED` | [`Outcome::Overload`] |
/// | 2 `UNKNOWN`, 4 `DEADLINE_EXCEEDED`, 13 `INTERNAL`, 14 `UNAVAILABLE`, 15 `DATA_LOSS` | [`Outcome::Failure`] |
/// | 1 `CANCELLED`, 3 `INVALID_ARGUMENT`, 5 `NOT_FOUND`, 6 `ALREADY_EXISTS`, 7 `PERMISSION_DENIED`, 9 `FAILED_PRECONDITION`, 10 `ABORTED`, 11 `OUT_OF_RANGE`, 12 `UNIMPLEMENTED`, 16 `UNAUTHENTICATED` | [`Outcome::Ignored`]: about the call, not the backend's health |
/// | any other value, or one that is not a number | [`Outcome::Failure`] (gRPC reads an unknown code as `UNKNOWN`) |
/// | absent: the body ended without trailers, or trailers without `grpc-status` | [`Outcome::Failure`] (a gRPC client reports the call as failed, `INTERNAL` or `UNKNOWN`: the server or a proxy broke the protocol) |
///
/// `ABORTED` reports a conflict between concurrent operations (Envoy maps
/// it to HTTP 409), so it is the call's, not a sign of a sick backend.
/// Errors without a response (timeouts, connection errors) fail.
///
/// ```
/// use tower_model_balance::classify::{Classified, Classify, ClassifyEos, GrpcErrorsAsFailures, Outcome};
///
/// let grpc = GrpcErrorsAsFailures::new();
/// // Trailers-only: the status is in the headers.
/// let rsp = http::Response::builder().header("grpc-status", "14").body(()).unwrap();
/// let c = Classify::<_, std::io::Error>::classify_response(&grpc, &rsp);
/// assert!(matches!(c, Classified::Ready(Outcome::Failure)));
/// // Otherwise it waits for the trailers.
/// let rsp = http::Response::new(());
/// let Classified::AtEnd(eos) = Classify::<_, std::io::Error>::classify_response(&grpc, &rsp) else {
///     unreachable!()
/// };
/// let mut trailers = http::HeaderMap::new();
/// trailers.insert("grpc-status", "8".parse().unwrap());
/// assert_eq!(eos.classify_eos(Some(&trailers)), Outcome::Overload);
/// ```
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct GrpcErrorsAsFailures;

impl GrpcErrorsAsFailures {
    /// Creates the classifier.
    pub const fn new() -> Self {
        Self
    }

    /// The outcome for a gRPC status code alone (see the table above).
    pub(crate) fn classify_code(code: i32) -> Outcome {
        match code {
            0 => Outcome::Success,
            8 => Outcome::Overload,
            1 | 3 | 5 | 6 | 7 | 9 | 10 | 11 | 12 | 16 => Outcome::Ignored,
            // 2, 4, 13, 14, 15, and codes gRPC reads as UNKNOWN.
            _ => Outcome::Failure,
        }
    }

    /// The outcome of a response's head: an HTTP status other than 200 as
    /// for HTTP, else `grpc-status` in `headers`, else deferred.
    pub(super) fn classify_head(
        status: http::StatusCode,
        headers: &http::HeaderMap,
    ) -> Classified<GrpcEosErrorsAsFailures> {
        if status != http::StatusCode::OK {
            return Classified::Ready(ServerErrorsAsFailures::classify_status(status));
        }
        match Self::classify_headers(headers) {
            Some(outcome) => Classified::Ready(outcome),
            None => Classified::AtEnd(GrpcEosErrorsAsFailures { _private: () }),
        }
    }

    /// The outcome `grpc-status` in `headers` gives, if present.
    fn classify_headers(headers: &http::HeaderMap) -> Option<Outcome> {
        let value = headers.get("grpc-status")?;
        let code = value.to_str().ok().and_then(|s| s.trim().parse().ok());
        Some(code.map_or(Outcome::Failure, Self::classify_code))
    }
}

impl<B, E> Classify<http::Response<B>, E> for GrpcErrorsAsFailures {
    type Eos = GrpcEosErrorsAsFailures;

    fn classify_response(
        &self,
        response: &http::Response<B>,
    ) -> Classified<GrpcEosErrorsAsFailures> {
        Self::classify_head(response.status(), response.headers())
    }

    fn classify_error(&self, _: &E) -> Outcome {
        Outcome::Failure
    }
}

/// The end-of-body half of [`GrpcErrorsAsFailures`]: reads `grpc-status`
/// in the trailers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrpcEosErrorsAsFailures {
    _private: (),
}

impl GrpcEosErrorsAsFailures {
    /// The end-of-body half, for a response whose head deferred.
    pub(super) const fn new() -> Self {
        Self { _private: () }
    }
}

impl ClassifyEos for GrpcEosErrorsAsFailures {
    fn classify_eos(self, trailers: Option<&http::HeaderMap>) -> Outcome {
        trailers
            .and_then(GrpcErrorsAsFailures::classify_headers)
            .unwrap_or(Outcome::Failure)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(status: u16, grpc: Option<&str>) -> Classified<GrpcEosErrorsAsFailures> {
        let mut rsp = http::Response::builder().status(status);
        if let Some(code) = grpc {
            rsp = rsp.header("grpc-status", code);
        }
        Classify::<_, ()>::classify_response(&GrpcErrorsAsFailures, &rsp.body(()).unwrap())
    }

    fn eos(grpc: Option<&str>) -> Outcome {
        let mut trailers = http::HeaderMap::new();
        if let Some(code) = grpc {
            trailers.insert("grpc-status", code.parse().unwrap());
        }
        GrpcEosErrorsAsFailures { _private: () }.classify_eos(Some(&trailers))
    }

    #[test]
    fn codes() {
        let c = GrpcErrorsAsFailures::classify_code;
        assert_eq!(c(0), Outcome::Success);
        assert_eq!(c(8), Outcome::Overload);
        for failed in [2, 4, 13, 14, 15, 17, -1] {
            assert_eq!(c(failed), Outcome::Failure, "code {failed}");
        }
        for ignored in [1, 3, 5, 6, 7, 9, 10, 11, 12, 16] {
            assert_eq!(c(ignored), Outcome::Ignored, "code {ignored}");
        }
    }

    #[test]
    fn heads_and_trailers() {
        assert_eq!(head(503, None), Classified::Ready(Outcome::Failure));
        assert_eq!(head(429, None), Classified::Ready(Outcome::Overload));
        assert_eq!(head(404, Some("0")), Classified::Ready(Outcome::Ignored));
        assert_eq!(head(200, Some("0")), Classified::Ready(Outcome::Success));
        assert_eq!(head(200, Some("x")), Classified::Ready(Outcome::Failure));
        assert!(matches!(head(200, None), Classified::AtEnd(_)));
        assert_eq!(eos(Some("0")), Outcome::Success);
        assert_eq!(eos(Some("3")), Outcome::Ignored);
        assert_eq!(eos(None), Outcome::Failure, "trailers without a status");
        let none = GrpcEosErrorsAsFailures { _private: () }.classify_eos(None);
        assert_eq!(none, Outcome::Failure, "no trailers at all");
    }
}
