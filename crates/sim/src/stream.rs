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
use tokio::sync::{oneshot, OwnedSemaphorePermit};
use tokio::time::{Instant, Sleep};

use super::fault::Fault;
use super::openai::Route;
use super::prefill::usage_json;
use super::protocol::{json_escape, vllm_error};
use super::queue::Counted;
use super::state::{Prefilled, State};

/// The text of each token event.
pub(super) const TOKEN_TEXT: &str = "tok ";

/// The message of a [`Fault::StreamError`]'s error event.
const ERROR_MESSAGE: &str = "simulated error mid-stream (Fault::StreamError)";

/// What a streamed answer will send, fixed when its request is admitted.
#[derive(Debug)]
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
    /// `stream_options.include_usage`: a usage chunk before `[DONE]`.
    pub(super) include_usage: bool,
    /// Prompt tokens (for the usage chunk without the prefix cache).
    pub(super) prompt_tokens: u64,
    /// With the prefix cache: told when the prefill is done, which is
    /// when the first token is due (`first_at` is not used then).
    pub(super) prefill: Option<oneshot::Receiver<Prefilled>>,
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
    /// The prefill to wait for before the first token (prefix cache on).
    prefill: Option<oneshot::Receiver<Prefilled>>,
    /// The start of the usage chunk (`stream_options.include_usage`):
    /// `data: {"id", "object", "created", "model", "choices": [], "usage":`.
    usage_head: Option<String>,
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
        plan: Plan,
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
        let envelope = envelope(plan.route, &plan.model, plan.seq, created);
        let head = format!(r#"data: {envelope},"choices":[{{"index":0,"#);
        let usage_head = plan
            .include_usage
            .then(|| format!(r#"data: {envelope},"choices":[],"usage":"#));
        let end_event = match (end, &usage_head) {
            (End::Done, Some(usage_head)) if plan.prefill.is_none() => {
                let prompt = Prefilled {
                    prompt: plan.prompt_tokens,
                    cached: 0,
                };
                done_with_usage(usage_head, prompt, plan.tokens)
            }
            (End::Done, _) => Bytes::from_static(b"data: [DONE]\n\n"),
            (End::Error, _) => {
                let error = vllm_error(ERROR_MESSAGE, "InternalServerError", 500);
                Bytes::from(format!("data: {error}\n\n"))
            }
            (End::Cut, _) => Bytes::new(),
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
            armed: plan.prefill.is_none() && next > Instant::now(),
            prefill: plan.prefill,
            usage_head,
            sleep: Box::pin(tokio::time::sleep_until(next)),
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
        if let Some(prefill) = &mut this.prefill {
            let Ok(prefilled) = ready!(Pin::new(prefill).poll(cx)) else {
                // The engine stopped with the server.
                this.finish(false);
                return Poll::Ready(Some(Err(std::io::Error::other("server stopped"))));
            };
            this.prefill = None;
            this.next = Instant::now();
            if let (End::Done, Some(usage_head)) = (this.end, &this.usage_head) {
                this.end_event = done_with_usage(usage_head, prefilled, this.tokens);
            }
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

/// What every chunk of a stream starts with: `{"id", "object",
/// "created", "model"` (no closing brace).
fn envelope(route: Route, model: &str, seq: u64, created: u64) -> String {
    let (id, object) = match route {
        Route::Completions => ("cmpl", "text_completion"),
        _ => ("chatcmpl", "chat.completion.chunk"),
    };
    format!(
        r#"{{"id":"{id}-sim-{seq}","object":"{object}","created":{created},"model":"{}""#,
        json_escape(model)
    )
}

/// The start of every token event of a stream: `data: {"id", "object",
/// "created", "model", "choices":[{"index":0,`.
#[cfg(test)]
fn head(route: Route, model: &str, seq: u64, created: u64) -> String {
    let envelope = envelope(route, model, seq, created);
    format!(r#"data: {envelope},"choices":[{{"index":0,"#)
}

/// The usage chunk of `prefilled` and `completion` tokens, then
/// `data: [DONE]`, in one frame.
fn done_with_usage(usage_head: &str, prefilled: Prefilled, completion: u32) -> Bytes {
    let usage = usage_json(prefilled, completion);
    Bytes::from(format!("{usage_head}{usage}}}\n\ndata: [DONE]\n\n"))
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

        let usage_head = format!(
            r#"data: {},"choices":[],"usage":"#,
            envelope(Route::Completions, "m", 8, 0)
        );
        let prefilled = Prefilled {
            prompt: 40,
            cached: 32,
        };
        let frame = done_with_usage(&usage_head, prefilled, 3);
        let text = std::str::from_utf8(&frame).unwrap();
        let (usage, done) = text.split_at(text.find("data: [DONE]").unwrap());
        assert_eq!(done, "data: [DONE]\n\n");
        let usage = json(usage);
        assert_eq!(usage["id"], "cmpl-sim-8");
        assert_eq!(usage["choices"], serde_json::json!([]));
        assert_eq!(usage["usage"]["total_tokens"], 43);
        assert_eq!(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 32);
    }
}
