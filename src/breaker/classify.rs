//! What counts as a failure, decided apart from the breaker (in the manner of
//! tower-http's `classify`).

use super::Outcome;

/// Classifies a call's result for a breaker.
///
/// Implemented for closures `Fn(Result<&T, &E>) -> Outcome` and by
/// [`ServerErrorsAsFailures`] for HTTP responses. Object-safe.
pub trait Classify<T, E> {
    /// The outcome of one call.
    fn classify(&self, result: Result<&T, &E>) -> Outcome;
}

impl<F, T, E> Classify<T, E> for F
where
    F: Fn(Result<&T, &E>) -> Outcome,
{
    fn classify(&self, result: Result<&T, &E>) -> Outcome {
        self(result)
    }
}

/// The default classifier for `http::Response`:
///
/// * 5xx: failure;
/// * 429 Too Many Requests: overload (a failure for the rate, not for the
///   consecutive-failure trip);
/// * other 4xx: ignored — the caller's mistake says nothing about the
///   backend (a half-open permit still comes back);
/// * everything else: success;
/// * an error (timeout, connection refused or reset): failure.
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
    fn classify(&self, result: Result<&http::Response<B>, &E>) -> Outcome {
        match result {
            Ok(response) => Self::classify_status(response.status()),
            Err(_) => Outcome::Failure,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;

    #[test]
    fn http_statuses() {
        let c = |code: u16| {
            ServerErrorsAsFailures::classify_status(StatusCode::from_u16(code).unwrap())
        };
        assert_eq!(c(200), Outcome::Success);
        assert_eq!(c(304), Outcome::Success);
        assert_eq!(c(404), Outcome::Ignored);
        assert_eq!(c(429), Outcome::Overload);
        assert_eq!(c(500), Outcome::Failure);
        assert_eq!(c(503), Outcome::Failure);
        let err: Result<&http::Response<()>, &&str> = Err(&"reset");
        assert_eq!(ServerErrorsAsFailures.classify(err), Outcome::Failure);
    }

    #[test]
    fn closures_classify() {
        let always_ok = |_: Result<&u8, &()>| Outcome::Success;
        let dynamic: &dyn Classify<u8, ()> = &always_ok;
        assert_eq!(dynamic.classify(Err(&())), Outcome::Success);
    }
}
