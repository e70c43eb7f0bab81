//! HTTP: the status decides.

use std::convert::Infallible;

use super::outcome::Outcome;
use super::traits::{Classified, Classify};

/// The default classifier for `http::Response`:
///
/// | response | outcome |
/// |---|---|
/// | 5xx | [`Outcome::Failure`] |
/// | 429 Too Many Requests | [`Outcome::Overload`]: a failure for the rate, not for the consecutive-failure trip |
/// | other 4xx | [`Outcome::Ignored`]: the caller's mistake says nothing about the backend (a half-open permit still comes back) |
/// | 1xx, 2xx, 3xx | [`Outcome::Success`] |
/// | any error (timeout, connection refused or reset) | [`Outcome::Failure`] |
///
/// The status decides from the head; the breaker still records the call
/// at the end of its body (a body error fails it).
#[derive(Debug, Clone, Copy, Default)]
#[non_exhaustive]
pub struct ServerErrorsAsFailures;

impl ServerErrorsAsFailures {
    /// Creates the classifier.
    pub const fn new() -> Self {
        Self
    }

    /// The outcome for a status code alone.
    pub fn classify_status(status: http::StatusCode) -> Outcome {
        if status == http::StatusCode::TOO_MANY_REQUESTS {
            Outcome::Overload
        } else if status.is_server_error() {
            Outcome::Failure
        } else if status.is_client_error() {
            Outcome::Ignored
        } else {
            Outcome::Success
        }
    }
}

impl<B, E> Classify<http::Response<B>, E> for ServerErrorsAsFailures {
    type Eos = Infallible;

    fn classify_response(&self, response: &http::Response<B>) -> Classified<Infallible> {
        Classified::Ready(Self::classify_status(response.status()))
    }

    fn classify_error(&self, _: &E) -> Outcome {
        Outcome::Failure
    }
}
