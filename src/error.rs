//! Typed errors returned by the middleware in this crate.
//!
//! Every error is a small concrete type that the middleware boxes into a
//! [`BoxError`]; callers check for one with `err.is::<T>()` or
//! `err.downcast_ref::<T>()`, as with tower's own `Elapsed` or `Overloaded`:
//!
//! ```
//! use tower_model_balance::error::{BoxError, NoHealthyBackend};
//! use tower_model_balance::route::ModelId;
//!
//! let err: BoxError = NoHealthyBackend::new(ModelId::new("llama-3-8b").unwrap()).into();
//! assert!(err.is::<NoHealthyBackend>());
//! ```

use std::fmt;
use std::time::Duration;

use crate::backend::BackendId;
use crate::route::{ModelId, Urgency};

/// The boxed error type used by services in this crate, as in tower.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

mod stream;

pub use self::stream::{StreamFailed, StreamFailure};

/// A request's route info could not be read: a required value is missing or a
/// value is invalid.
///
/// Returned by [`crate::route`] extraction and by every middleware that reads
/// route info (for example the balancer) before the request is sent anywhere.
/// `source` names where the value came from (a header name such as
/// `x-model-id`, `body` or `path` for a model ID read from the JSON body or
/// the KServe v2 path, or `model` for a value built in code); `reason` says
/// what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InvalidRoute {
    /// Where the value was read: a header name, `body` or `path`, or `model`
    /// for a model ID built in code.
    pub source: &'static str,
    /// What is wrong with the value.
    pub reason: InvalidReason,
}

/// Why a route value was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum InvalidReason {
    /// The value is required and absent.
    Missing,
    /// The value is empty.
    Empty,
    /// The value is longer than the allowed number of bytes (given).
    TooLong(usize),
    /// The value holds a control character or whitespace.
    ForbiddenCharacter,
    /// The value is not valid UTF-8.
    NotText,
    /// The header appears more than once.
    Duplicate,
    /// The value is not one of the allowed words or not a number.
    Unrecognized,
    /// The request body is JSON but not an object (a top-level array,
    /// string, number, `true`/`false`/`null`), or a value in it cannot be
    /// read (a string that is not UTF-8).
    NotJson,
    /// The request body is not valid JSON: a syntax error at `line` and
    /// `column` (both from 1, as `serde_json` counts them).
    MalformedJson {
        /// The line of the error, from 1.
        line: usize,
        /// The column of the error, from 1.
        column: usize,
    },
    /// The request body ends in the middle of a JSON value: it was cut
    /// short (or is empty).
    TruncatedJson,
    /// The request body could not be read whole (the client broke it
    /// off, or its framing is wrong): the client's error, not a backend's.
    Unreadable,
    /// A percent-encoded path segment holds a `%` not followed by two hex
    /// digits.
    BadEscape,
}

impl InvalidReason {
    /// Whether the body could not be read as a JSON object:
    /// [`NotJson`](Self::NotJson), [`MalformedJson`](Self::MalformedJson)
    /// or [`TruncatedJson`](Self::TruncatedJson).
    pub const fn is_json(&self) -> bool {
        matches!(
            self,
            Self::NotJson | Self::MalformedJson { .. } | Self::TruncatedJson
        )
    }
}

impl InvalidRoute {
    pub(crate) const fn new(source: &'static str, reason: InvalidReason) -> Self {
        Self { source, reason }
    }
}

impl fmt::Display for InvalidReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing => f.write_str("missing"),
            Self::Empty => f.write_str("empty"),
            Self::TooLong(max) => write!(f, "longer than {max} bytes"),
            Self::ForbiddenCharacter => f.write_str("holds whitespace or a control character"),
            Self::NotText => f.write_str("not valid UTF-8"),
            Self::Duplicate => f.write_str("given more than once"),
            Self::Unrecognized => f.write_str("not a recognized value"),
            Self::NotJson => f.write_str("not a JSON object"),
            Self::MalformedJson { line, column } => {
                write!(f, "malformed JSON at line {line}, column {column}")
            }
            Self::TruncatedJson => f.write_str("truncated JSON (or an empty body)"),
            Self::Unreadable => f.write_str("could not be read"),
            Self::BadEscape => f.write_str("holds a `%` not followed by two hex digits"),
        }
    }
}

impl fmt::Display for InvalidRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid route: `{}`: {}", self.source, self.reason)
    }
}

impl std::error::Error for InvalidRoute {}

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

/// No backend could take the request: none is known, or every candidate is
/// ejected (breaker open) while panic mode does not apply (the balancer's
/// `panic_threshold` is 0, or enough backends are eligible elsewhere).
/// Returned at once by the balancer, never after a wait.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NoHealthyBackend {
    /// The model the request was for.
    pub model: ModelId,
}

impl NoHealthyBackend {
    /// Creates the error for `model`.
    pub fn new(model: ModelId) -> Self {
        Self { model }
    }
}

impl fmt::Display for NoHealthyBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no healthy backend for model `{}`", self.model)
    }
}

impl std::error::Error for NoHealthyBackend {}

/// Every backend the request could go to is at its admission limit (see
/// [`AdmissionConfig`](crate::balance::AdmissionConfig)): the request was
/// shed, never sent. Returned by the balancer at once (within the `call`),
/// or after the request waited for room as long as its urgency allows, or
/// when a request of a higher urgency took its place in a full queue. A
/// gateway answers it `429 Too Many Requests` (or 503) with a
/// `Retry-After` of [`retry_after`](Self::retry_after), rounded up to whole
/// seconds.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Overloaded {
    /// The model the request was for.
    pub model: ModelId,
    /// The request's urgency.
    pub urgency: Urgency,
    /// How long it waited for room before it was shed (zero: shed at once).
    pub waited: Duration,
    /// When to try again: the configuration's hint.
    pub retry_after: Duration,
}

impl Overloaded {
    /// Creates the error.
    pub fn new(model: ModelId, urgency: Urgency, waited: Duration, retry_after: Duration) -> Self {
        Self {
            model,
            urgency,
            waited,
            retry_after,
        }
    }
}

impl fmt::Display for Overloaded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "overloaded: every backend for model `{}` is at its admission limit ({:?} request shed after {} ms); retry after {} ms",
            self.model,
            self.urgency,
            self.waited.as_millis(),
            self.retry_after.as_millis()
        )
    }
}

impl std::error::Error for Overloaded {}

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
    pub const fn new(retry_after: Duration) -> Self {
        Self { retry_after }
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
/// its last `call`, against tower's `Service` contract. The circuit
/// breaker returns it (never calling its inner service, counting nothing)
/// rather than panic, as tower's `Buffer` does, or forward to a service
/// that may not be ready: drive it with `ServiceExt::ready` or `oneshot`.
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

/// A model could not be loaded on the backend the balancer placed it on
/// (see [`placement`](crate::placement)): the load call failed, was refused,
/// or did not finish within the placement policy's load timeout. Every
/// request that waited for that load gets this error; the load counts as
/// one failure for the backend's breaker (in its configured scope) and its
/// health, however many requests waited, never as a slow call.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModelLoadFailed {
    /// The backend the model was to be loaded on.
    pub backend: BackendId,
    /// The model.
    pub model: ModelId,
    /// What went wrong, e.g. `"timed out after 60s"` or
    /// `"probe answered 500 Internal Server Error"` (the loader's error:
    /// loaders share the probes' error type).
    pub reason: String,
}

impl ModelLoadFailed {
    /// Creates the error.
    pub fn new(backend: BackendId, model: ModelId, reason: impl Into<String>) -> Self {
        Self {
            backend,
            model,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for ModelLoadFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "loading model `{}` on backend `{}` failed: {}",
            self.model, self.backend, self.reason
        )
    }
}

impl std::error::Error for ModelLoadFailed {}

/// The request names a model that the backend's model repository does not
/// know: with on-demand [`placement`](crate::placement), only models the
/// repository index lists are ever loaded. Returned at once; no load is
/// triggered and the backend's breaker counts nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnknownModel {
    /// The backend whose repository was asked.
    pub backend: BackendId,
    /// The model.
    pub model: ModelId,
}

impl UnknownModel {
    /// Creates the error.
    pub fn new(backend: BackendId, model: ModelId) -> Self {
        Self { backend, model }
    }
}

impl fmt::Display for UnknownModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "model `{}` is not in the repository of backend `{}`",
            self.model, self.backend
        )
    }
}

impl std::error::Error for UnknownModel {}

/// A hedge's backup ([`Exclude::new`](crate::backend::Exclude::new)) that
/// has nowhere better to go: no eligible backend but the excluded one has
/// the model resident, so the backup would land on the backend the first
/// attempt went to, or pay a cold load elsewhere. The balancer refuses it
/// at once, before picking (nothing is counted on any backend); the
/// hedging layer counts it as
/// [`suppressed_by_no_alternative`](crate::hedge::HedgeStats::suppressed_by_no_alternative)
/// and lets the first attempt go on alone.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NoAlternative {
    /// The model the backup was for.
    pub model: ModelId,
    /// The backend its first attempt went to.
    pub excluded: BackendId,
}

impl NoAlternative {
    /// Creates the error.
    pub(crate) fn new(model: ModelId, excluded: BackendId) -> Self {
        Self { model, excluded }
    }
}

impl fmt::Display for NoAlternative {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no eligible backend but `{}` has model `{}` resident: the backup is not sent",
            self.excluded, self.model
        )
    }
}

impl std::error::Error for NoAlternative {}
