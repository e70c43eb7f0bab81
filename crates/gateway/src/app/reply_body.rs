//! The body of every answer the gateway forwards: the stack's body as it
//! comes, ended early by the drain's cut or the request's total timeout,
//! and holding the request's in-flight slot until it ends. An event
//! stream that ends early, or whose backend fails mid-stream, ends with an
//! SSE error event its client reads (OpenAI's client raises it), never a
//! bare EOF that reads as a complete, shorter answer.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::WaitForCancellationFutureOwned;
use tower_model_balance::error::BoxError;

use super::access_log::Entry;
use super::phases::{Phase, PhaseElapsed};

pin_project! {
    /// An answer's body on its way to the client (see the module's docs).
    pub struct ReplyBody<B> {
        #[pin]
        inner: B,
        #[pin]
        cut: WaitForCancellationFutureOwned,
        #[pin]
        deadline: Sleep,
        timeout: Duration,
        event_stream: bool,
        done: bool,
        slot: Option<OwnedSemaphorePermit>,
        log: Logged,
    }
}

/// The request's access-log line, written once: when the answer ends, or
/// when the body is dropped before (the client went away).
#[derive(Debug, Default)]
struct Logged(Option<Entry>);

impl Logged {
    fn frame(&mut self) {
        if let Some(entry) = self.0.as_mut() {
            entry.first_frame.get_or_insert_with(Instant::now);
        }
    }

    fn end(&mut self, ended: &str) {
        if let Some(entry) = self.0.take() {
            entry.write(ended);
        }
    }
}

impl Drop for Logged {
    fn drop(&mut self) {
        self.end("client_gone");
    }
}

impl<B> ReplyBody<B> {
    /// `inner`, ended at `cut` or at `deadline` (the request's total
    /// `timeout` from its start).
    pub fn new(
        inner: B,
        cut: WaitForCancellationFutureOwned,
        deadline: Instant,
        timeout: Duration,
    ) -> Self {
        Self {
            inner,
            cut,
            deadline: tokio::time::sleep_until(deadline),
            timeout,
            event_stream: false,
            done: false,
            slot: None,
            log: Logged::default(),
        }
    }

    /// It is an event stream: it ends early with an SSE error event.
    pub fn event_stream(mut self, event_stream: bool) -> Self {
        self.event_stream = event_stream;
        self
    }

    /// Holds `slot` (a request's in flight) until it ends.
    pub fn slot(mut self, slot: OwnedSemaphorePermit) -> Self {
        self.slot = Some(slot);
        self
    }

    /// Writes `entry`, the request's access-log line, when it ends — at
    /// once for an answer without a body (`content-length: 0`), which
    /// hyper sends without reading the body.
    pub fn log(mut self, entry: Option<Entry>) -> Self
    where
        B: Body,
    {
        self.log = Logged(entry);
        if self.inner.is_end_stream() {
            self.log.end("complete");
        }
        self
    }
}

/// Why an answer ended early, for its client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// The gateway's drain ended before the answer.
    Draining,
    /// The request's total timeout passed.
    RequestTimeout(Duration),
    /// The backend overran a phase (it stalled).
    Backend(PhaseElapsed),
    /// The backend's answer broke off.
    BackendFailed,
}

impl Ending {
    /// The OpenAI error `code`.
    pub fn code(&self) -> &'static str {
        match self {
            Ending::Draining => "gateway_draining",
            Ending::RequestTimeout(_) => "request_timeout",
            Ending::Backend(PhaseElapsed {
                phase: Phase::FirstToken,
                ..
            }) => "first_token_timeout",
            Ending::Backend(_) => "backend_stalled",
            Ending::BackendFailed => "stream_failed",
        }
    }

    /// The message: what happened, never a backend's address.
    pub fn message(&self) -> String {
        match self {
            Ending::Draining => {
                "the gateway is shutting down and its drain ended before this answer: retry".into()
            }
            Ending::RequestTimeout(after) => format!(
                "the request took longer than the gateway's request timeout ({} s)",
                after.as_secs_f64()
            ),
            Ending::Backend(elapsed) => elapsed.to_string(),
            Ending::BackendFailed => "the backend's answer broke off".into(),
        }
    }

    /// The SSE event an event stream ends with: OpenAI's error shape in a
    /// `data:` line.
    pub fn event(&self) -> Bytes {
        let error = serde_json::json!({
            "error": {
                "message": self.message(),
                "type": "server_error",
                "param": null,
                "code": self.code(),
            }
        });
        Bytes::from(format!("data: {error}\n\n"))
    }

    /// Why `error`, a backend's body failing, ended the answer.
    fn of(error: &BoxError) -> Self {
        let mut next: Option<&(dyn std::error::Error + 'static)> = Some(&**error);
        while let Some(error) = next {
            if let Some(elapsed) = error.downcast_ref::<PhaseElapsed>() {
                return Ending::Backend(elapsed.clone());
            }
            next = error.source();
        }
        Ending::BackendFailed
    }
}

/// The error a body that is not an event stream fails with when it ends
/// early: the connection is closed before its end.
#[derive(Debug)]
pub struct EndedEarly(pub Ending);

impl std::fmt::Display for EndedEarly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.message())
    }
}

impl std::error::Error for EndedEarly {}

impl<B> Body for ReplyBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        if *this.done {
            return Poll::Ready(None);
        }
        let ending = match this.inner.as_mut().poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.log.frame();
                // A body of known length is not polled past its last
                // frame: it ends here.
                if this.inner.is_end_stream() {
                    *this.done = true;
                    this.slot.take();
                    this.log.end("complete");
                }
                return Poll::Ready(Some(Ok(frame)));
            }
            Poll::Ready(None) => {
                *this.done = true;
                this.slot.take();
                this.log.end("complete");
                return Poll::Ready(None);
            }
            Poll::Ready(Some(Err(error))) => {
                let error = error.into();
                tracing::debug!(%error, "a backend's answer failed mid-body");
                let ending = Ending::of(&error);
                if !*this.event_stream {
                    *this.done = true;
                    this.slot.take();
                    this.log.end(ending.code());
                    return Poll::Ready(Some(Err(error)));
                }
                ending
            }
            Poll::Pending => {
                if this.cut.poll(cx).is_ready() {
                    Ending::Draining
                } else if this.deadline.poll(cx).is_ready() {
                    Ending::RequestTimeout(*this.timeout)
                } else {
                    return Poll::Pending;
                }
            }
        };
        *this.done = true;
        this.slot.take();
        this.log.end(ending.code());
        if *this.event_stream {
            Poll::Ready(Some(Ok(Frame::data(ending.event()))))
        } else {
            Poll::Ready(Some(Err(EndedEarly(ending).into())))
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_event_is_openais_error_shape_in_one_data_line() {
        let event = Ending::Draining.event();
        let text = std::str::from_utf8(&event).unwrap();
        let json = text
            .strip_prefix("data: ")
            .and_then(|t| t.strip_suffix("\n\n"))
            .unwrap();
        let value: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(value["error"]["code"], "gateway_draining");
        assert_eq!(value["error"]["type"], "server_error");
        assert!(!json.contains('\n'));
    }

    #[test]
    fn a_stall_names_its_phase() {
        let stalled = Ending::of(
            &PhaseElapsed {
                phase: Phase::Idle,
                after: Duration::from_secs(2),
                backend: None,
            }
            .into(),
        );
        assert_eq!(stalled.code(), "backend_stalled");
        assert!(stalled.message().contains("2 s"), "{}", stalled.message());
        let cut: BoxError = std::io::Error::from(std::io::ErrorKind::ConnectionReset).into();
        assert_eq!(Ending::of(&cut).code(), "stream_failed");
    }
}
