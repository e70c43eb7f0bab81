//! [`StreamFailed`]: an event stream that failed before its first chunk.

use std::fmt;

use super::common::BoxError;

/// An event stream (a `text/event-stream` answer) that failed before any
/// of it reached the caller: before its first `data:` chunk its body
/// failed (a connection cut), ended, or carried an error event. Returned
/// by [`FirstFrame`](crate::hedge::FirstFrame) in place of the response, so
/// that a [`RetryPolicy`](crate::hedge::RetryPolicy) may retry it on
/// another backend (nothing was passed on yet) and a hedge may still send
/// its backup. When a balancer or a breaker is below the `FirstFrame`, it
/// has counted the failure already (the body is dropped first).
#[derive(Debug)]
#[non_exhaustive]
pub struct StreamFailed {
    /// What happened.
    pub reason: StreamFailure,
    source: Option<BoxError>,
}

/// Why an event stream failed before its first chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StreamFailure {
    /// Its body failed: the connection was cut, or the body's own error
    /// (the error's [`source`](std::error::Error::source)).
    Cut,
    /// Its body ended without a chunk.
    Ended,
    /// It carried an error event (OpenAI's `data: {"error": …}` and the
    /// other shapes of `docs/streaming.md`).
    ErrorEvent,
}

impl StreamFailed {
    /// Creates the error, with the body's error if there was one.
    #[cfg_attr(not(feature = "hedge"), allow(dead_code))]
    pub(crate) fn new(reason: StreamFailure, source: Option<BoxError>) -> Self {
        Self { reason, source }
    }
}

impl fmt::Display for StreamFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Cut => "its body failed",
            Self::Ended => "it ended without a chunk",
            Self::ErrorEvent => "it carried an error event",
        })
    }
}

impl fmt::Display for StreamFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the event stream failed before its first chunk: {}",
            self.reason
        )?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl std::error::Error for StreamFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as _)
    }
}
