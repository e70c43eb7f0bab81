//! The route's errors: a request whose route info could not be read.

use std::fmt;

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
