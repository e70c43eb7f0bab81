//! Streamed answers: OpenAI-compatible server-sent events, as vLLM streams
//! a chat or completion request with `"stream": true` (see
//! [`protocol`](super::protocol#streaming)).
//!
//! The body is the stream: it owns the request's serving slot and its
//! count in the `running` gauge, and gives both back when it ends — or
//! when it is dropped, which is how a client that hangs up mid-stream is
//! seen (hyper drops the body of a connection that closed). It sleeps
//! between its frames itself (one timer per stream), and every token event
//! but the last is the same bytes, shared: two allocations per stream, none
//! per token.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body::{Body, Frame};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};

use super::fault::Fault;
use super::openai::Route;
use super::protocol::{json_escape, vllm_error};
use super::queue::Counted;
use super::server::State;

/// The text of each token event.
pub(super) const TOKEN_TEXT: &str = "tok ";

/// The message of a [`Fault::StreamError`]'s error event.
const ERROR_MESSAGE: &str = "simulated error mid-stream (Fault::StreamError)";

/// What a streamed answer will send, fixed when its request is admitted.
#[derive(Debug, Clone)]
pub(super) struct Plan {
    /// Chat completions or completions.
    pub(super) route: Route,
    /// The model named in the request.
    pub(super) model: String,
    /// The request's sequence number on this server, in the event ids.
    pub(super) seq: u64,
    /// Token events of a stream sent through its end.
    pub(super) tokens: u32,
    /// Time between two token events (before any fault).
    pub(super) decode: Duration,
    /// When the first token is due: after any cold load and the prefill.
    pub(super) first_at: Instant,
    /// The fault in force when the request arrived.
    pub(super) fault: Option<Fault>,
}

/// How a stream ends, once its token events are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// `data: [DONE]`, at once after the last token.
    Done,
    /// A vLLM error event, where the next token would have come; no
    /// `[DONE]`.
    Error,
    /// The connection broken, where the next token would have come.
    Cut,
}

/// A streamed answer's body: token events paced by the decode time, then
/// its end.
#[derive(Debug)]
pub(super) struct Stream {
    state: Arc<State>,
    /// The serving slot, held until the stream ends or is dropped.
    slot: Option<OwnedSemaphorePermit>,
    /// A token event (every one but the last).
    token: Bytes,
    /// The last token event, `"finish_reason":"length"`.
    last: Bytes,
    /// `data: [DONE]` or the error event (empty for a cut).
    end_event: Bytes,
    end: End,
    /// Token events of a full answer.
    tokens: u32,
    /// Token events sent before the end: `tokens`, or fewer under a fault.
    stop: u32,
    /// Token events sent so far.
    sent: u32,
    /// Time from one event to the next (the decode time, slowed).
    step: Duration,
    /// When the next event is due.
    next: Instant,
    /// Sleeps until `next` while `armed`.
    sleep: Pin<Box<Sleep>>,
    armed: bool,
    /// A cut has yielded once, so that the server flushed what was sent.
    flushed: bool,
    /// The slot is given back and the end counted.
    finished: bool,
}

impl Stream {
    /// Starts the stream of `plan`, taking over the request's serving
    /// `slot` and its count in the `running` gauge; counted in
    /// `ServerStats::streams`. Its first token event is due at once.
    pub(super) fn start(
        state: Arc<State>,
        slot: OwnedSemaphorePermit,
        running: Counted<'_>,
        plan: &Plan,
    ) -> Self {
        // From here the stream takes the count down (`finish`).
        running.keep();
        let (end, after) = match plan.fault {
            Some(Fault::StreamError { after_tokens }) => (End::Error, after_tokens),
            Some(Fault::StreamCut { after_tokens }) => (End::Cut, after_tokens),
            Some(Fault::Reset) => (End::Cut, plan.tokens / 2),
            _ => (End::Done, plan.tokens),
        };
        let factor = match plan.fault {
            Some(Fault::SlowDecode { factor }) => factor.max(1),
            _ => 1,
        };
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let head = head(plan.route, &plan.model, plan.seq, created);
        let end_event = match end {
            End::Done => Bytes::from_static(b"data: [DONE]\n\n"),
            End::Error => {
                let error = vllm_error(ERROR_MESSAGE, "InternalServerError", 500);
                Bytes::from(format!("data: {error}\n\n"))
            }
            End::Cut => Bytes::new(),
        };
        state.counters.streams.fetch_add(1, Ordering::Relaxed);
        state.changed.notify_waiters();
        let next = plan.first_at;
        Self {
            state,
            slot: Some(slot),
            token: Bytes::from(token_event(plan.route, &head, "null")),
            last: Bytes::from(token_event(plan.route, &head, r#""length""#)),
            end_event,
            end,
            tokens: plan.tokens,
            stop: after.min(plan.tokens),
            sent: 0,
            step: plan.decode.saturating_mul(factor),
            next,
            sleep: Box::pin(tokio::time::sleep_until(next)),
            armed: next > Instant::now(),
            flushed: false,
            finished: false,
        }
    }

    /// Gives the slot and the running count back and counts the stream
    /// as completed (sent to its end) or cancelled; once.
    fn finish(&mut self, completed: bool) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.slot = None;
        let c = &self.state.counters;
        c.running.fetch_sub(1, Ordering::Relaxed);
        let ended = if completed {
            &c.streams_completed
        } else {
            &c.streams_cancelled
        };
        ended.fetch_add(1, Ordering::Relaxed);
        self.state.changed.notify_waiters();
    }
}

impl Body for Stream {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if this.finished {
            return Poll::Ready(None);
        }
        if this.armed {
            ready!(this.sleep.as_mut().poll(cx));
            this.armed = false;
        }
        if this.sent < this.stop {
            this.sent += 1;
            this.state
                .counters
                .tokens_sent
                .fetch_add(1, Ordering::Relaxed);
            this.state.changed.notify_waiters();
            let last = this.sent == this.tokens;
            let frame = if last { &this.last } else { &this.token }.clone();
            // `[DONE]` follows the last token at once; any other next
            // event is a decode step later.
            let done_next = last && this.end == End::Done;
            if !done_next && !this.step.is_zero() {
                // The decode steps count from when the first token went
                // out (it may go later than due, behind its head), then
                // keep their pace.
                if this.sent == 1 {
                    this.next = this.next.max(Instant::now());
                }
                this.next += this.step;
                this.sleep.as_mut().reset(this.next);
                this.armed = true;
            }
            return Poll::Ready(Some(Ok(Frame::data(frame))));
        }
        match this.end {
            End::Done | End::Error => {
                let frame = this.end_event.clone();
                this.finish(true);
                Poll::Ready(Some(Ok(Frame::data(frame))))
            }
            End::Cut if !this.flushed => {
                // Yield once, so that the server writes out what was sent.
                this.flushed = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            End::Cut => {
                this.finish(true);
                Poll::Ready(Some(Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "connection cut mid-stream (Fault::StreamCut)",
                ))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.finished
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // Dropped before its end: the client left.
        self.finish(false);
    }
}

/// The start of every event of a stream: `data: {"id", "object",
/// "created", "model", "choices":[{"index":0,`.
fn head(route: Route, model: &str, seq: u64, created: u64) -> String {
    let (id, object) = match route {
        Route::Completions => ("cmpl", "text_completion"),
        _ => ("chatcmpl", "chat.completion.chunk"),
    };
    format!(
        r#"data: {{"id":"{id}-sim-{seq}","object":"{object}","created":{created},"model":"{}","choices":[{{"index":0,"#,
        json_escape(model)
    )
}

/// One token event, `finish_reason` its JSON value.
fn token_event(route: Route, head: &str, finish_reason: &str) -> String {
    match route {
        Route::Completions => format!(
            r#"{head}"text":"{TOKEN_TEXT}","logprobs":null,"finish_reason":{finish_reason}}}]}}{}"#,
            "\n\n"
        ),
        _ => format!(
            r#"{head}"delta":{{"content":"{TOKEN_TEXT}"}},"finish_reason":{finish_reason}}}]}}{}"#,
            "\n\n"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(event: &str) -> serde_json::Value {
        let data = event.strip_prefix("data: ").unwrap().strip_suffix("\n\n");
        serde_json::from_str(data.unwrap()).expect(event)
    }

    #[test]
    fn events_are_openai_chunks() {
        let head = head(Route::ChatCompletions, r#"m"1"#, 7, 1_700_000_000);
        let chunk = json(&token_event(Route::ChatCompletions, &head, "null"));
        assert_eq!(chunk["id"], "chatcmpl-sim-7");
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["created"], 1_700_000_000);
        assert_eq!(chunk["model"], r#"m"1"#);
        assert_eq!(chunk["choices"][0]["delta"]["content"], TOKEN_TEXT);
        assert!(chunk["choices"][0]["finish_reason"].is_null());

        let head = super::head(Route::Completions, "m", 8, 0);
        let chunk = json(&token_event(Route::Completions, &head, r#""length""#));
        assert_eq!(chunk["id"], "cmpl-sim-8");
        assert_eq!(chunk["object"], "text_completion");
        assert_eq!(chunk["choices"][0]["text"], TOKEN_TEXT);
        assert_eq!(chunk["choices"][0]["finish_reason"], "length");
    }
}
