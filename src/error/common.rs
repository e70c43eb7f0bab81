//! The errors that name no value of a module above them: a configuration
//! out of range, a missing runtime, a misused service, a body too large, an
//! open breaker, and the boxed error type. Every module may return them;
//! this file imports nothing of the crate, so the ground modules (`route`,
//! `backend`, `ring`, `endpoint`) import them from here, below
//! [`crate::error`]'s re-exports.

use std::fmt;
use std::time::Duration;

/// The boxed error type used by services in this crate: tower's own.
pub(crate) use tower::BoxError;

/// A request body is larger than the configured limit, so it was not read
/// to the end and the request was not sent.
///
/// Returned by [`ModelFromBody`](crate::route::ModelFromBody) (feature
/// `body`) while it buffers the body to find the model ID. A gateway answers
/// `413 Payload Too Large`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PayloadTooLarge {
    /// The limit that was exceeded, in bytes.
    pub limit: usize,
}

impl PayloadTooLarge {
    /// Creates the error for a body over `limit` bytes.
    pub const fn new(limit: usize) -> Self {
        Self { limit }
    }
}

impl fmt::Display for PayloadTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "request body larger than {} bytes", self.limit)
    }
}

impl std::error::Error for PayloadTooLarge {}

/// The circuit breaker is open (or its half-open probes are all taken): the
/// request was refused without being sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct BreakerOpen {
    /// How long until the breaker may let a call through: the rest of its
    /// open duration; while half-open with every probe out, the rest of the
    /// probe round (its maximum wait); forced open, the policy's maximum
    /// open duration (a hint: only a change of mode admits). Zero for a
    /// backpressure reservation that outlived its round.
    pub retry_after: Duration,
}

impl BreakerOpen {
    /// Creates the error with the given wait.
    #[cfg_attr(not(feature = "breaker"), allow(dead_code))]
    pub(crate) const fn new(retry_after: Duration) -> Self {
        Self { retry_after }
    }

    /// `BreakerOpen::new` for the tests of a crate that maps the error (feature
    /// `testing`): not part of the public API.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn for_tests(retry_after: Duration) -> Self {
        Self::new(retry_after)
    }
}

impl fmt::Display for BreakerOpen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "circuit breaker open; retry after {} ms",
            self.retry_after.as_millis()
        )
    }
}

impl std::error::Error for BreakerOpen {}

/// A service was called without a `poll_ready` that returned `Ready` since
/// its last `call` (or since it was cloned), against tower's `Service`
/// contract. The circuit breaker, the balancer and the hedge return it
/// (never calling their inner service, taking and counting nothing)
/// rather than panic, as tower's `Buffer` does, or forward to a service
/// that may not be ready: drive them with `ServiceExt::ready` or
/// `oneshot`. See the crate's [readiness contract](crate#readiness).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct NotReady;

impl fmt::Display for NotReady {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("service called before `poll_ready` returned `Ready`")
    }
}

impl std::error::Error for NotReady {}

/// A constructor that starts background tasks (the balancer's discovery
/// and health tasks, probes, placement's repository refresh, the metrics
/// export) was called outside a Tokio runtime: call it from within one
/// (`#[tokio::main]`, `Runtime::enter`). Nothing was started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct NoRuntime;

impl fmt::Display for NoRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("no Tokio runtime entered: this constructor spawns background tasks")
    }
}

impl std::error::Error for NoRuntime {}

#[cfg(feature = "balance")]
impl NoRuntime {
    /// The current runtime's handle, or this error.
    pub(crate) fn current() -> Result<tokio::runtime::Handle, Self> {
        tokio::runtime::Handle::try_current().map_err(|_| Self)
    }
}

/// A configuration value is out of its allowed range. Returned by every
/// builder's `build`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InvalidConfig {
    /// The field, as named by its builder method.
    pub field: &'static str,
    /// The allowed range or rule, in words.
    pub expected: &'static str,
}

impl InvalidConfig {
    /// The error naming `field` and what it must be, for builders outside
    /// this crate that report as its builders do (the simulated servers'
    /// `ServerConfigBuilder`, or your own).
    pub const fn new(field: &'static str, expected: &'static str) -> Self {
        Self { field, expected }
    }
}

impl fmt::Display for InvalidConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid config: `{}` must be {}",
            self.field, self.expected
        )
    }
}

impl std::error::Error for InvalidConfig {}
