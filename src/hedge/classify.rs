//! Which responses count as failures for the hedge: a failure does not win
//! over an attempt still running.

/// Decides whether a response (not an error: errors are always failures)
/// is a failure. A failed attempt never wins while another is running; it
/// is returned only when every attempt failed (the last to finish).
pub trait Classify<R>: Clone {
    /// Whether `response` is a failure.
    fn is_failure(&self, response: &R) -> bool;
}

/// HTTP responses with a 5xx status are failures (the default).
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerErrors;

impl<B> Classify<http::Response<B>> for ServerErrors {
    fn is_failure(&self, response: &http::Response<B>) -> bool {
        response.status().is_server_error()
    }
}

/// Only errors are failures; every response is a success.
#[derive(Debug, Clone, Copy, Default)]
pub struct ErrorsOnly;

impl<R> Classify<R> for ErrorsOnly {
    fn is_failure(&self, _: &R) -> bool {
        false
    }
}
