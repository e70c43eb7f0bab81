//! [`StreamFailed`]: an event stream that failed before its first token.

use std::fmt;

use super::BoxError;

/// An event stream (a `text/event-stream` answer) that failed before any
/// of it reached the caller: its body failed (a connection cut), ended, or
/// began with an error event, before its first token. Returned by
/// [`FirstFrame`](crate::hedge::FirstFrame) in place of the response, so
/// that a [`RetryPolicy`](crate::hedge::RetryPolicy) may retry it on
/// another backend (nothing was passed on yet) and a hedge may still send
/// its backup. The backend's breaker and health have counted it as a
/// failure already, below.
#[derive(Debug)]
#[non_exhaustive]
pub struct StreamFailed {
    /// What happened: `"body error"`, `"ended before its first frame"` or
    /// `"error event"`.
    pub reason: &'static str,
    source: Option<BoxError>,
}

impl StreamFailed {
    /// Creates the error, with the body's error if there was one.
    pub(crate) fn new(reason: &'static str, source: Option<BoxError>) -> Self {
        Self { reason, source }
    }
}

impl fmt::Display for StreamFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the event stream failed before its first token: {}",
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
