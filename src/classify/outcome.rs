//! [`Outcome`]: how one call went, as far as the backend's health goes.

/// How one call went, as far as the backend's health goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// The backend served the call.
    Success,
    /// The backend failed the call (5xx, timeout, connection error).
    Failure,
    /// The backend shed the call (429 Too Many Requests, gRPC
    /// `RESOURCE_EXHAUSTED`): for the breaker a failure for the failure
    /// rate, but it neither counts toward nor breaks a run of consecutive
    /// failures — an overloaded backend is up. For the hedge it never wins
    /// over an attempt still running, and never sends a backup early.
    Overload,
    /// Says nothing about the backend (a caller's 4xx): not counted, but a
    /// half-open permit comes back. For the hedge it is an answer (another
    /// backend would say the same), so it wins.
    Ignored,
}
