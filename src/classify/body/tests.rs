use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::task::Waker;

use super::*;
use crate::classify::GrpcEosErrorsAsFailures;

/// What the receiver saw, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    FirstFrame,
    Complete(Outcome),
}

#[derive(Debug)]
struct Receiver(Log);

impl Complete for Receiver {
    fn frame(&mut self, _: u32) {
        let mut seen = self.0.borrow_mut();
        if !seen.contains(&Seen::FirstFrame) {
            seen.push(Seen::FirstFrame);
        }
    }

    fn complete(self, outcome: Outcome) {
        self.0.borrow_mut().push(Seen::Complete(outcome));
    }
}

/// A scripted body: its frames (or errors) in order; it ends after the
/// last unless `open` (then it reports no end of stream until polled to
/// `None`).
#[derive(Debug)]
struct Script {
    frames: VecDeque<Result<Frame<&'static [u8]>, &'static str>>,
    open: bool,
}

impl Body for Script {
    type Data = &'static [u8];
    type Error = &'static str;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let frame = self.frames.pop_front();
        if frame.is_none() {
            self.open = false;
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.frames.is_empty() && !self.open
    }
}

fn data() -> Result<Frame<&'static [u8]>, &'static str> {
    Ok(Frame::data(&b"token"[..]))
}

fn trailers(grpc: &str) -> Result<Frame<&'static [u8]>, &'static str> {
    let mut map = HeaderMap::new();
    map.insert("grpc-status", grpc.parse().unwrap());
    Ok(Frame::trailers(map))
}

type Verdict = Classified<GrpcEosErrorsAsFailures>;

/// The body under test, and what its receiver saw.
type Tested = CompletionBody<Script, GrpcEosErrorsAsFailures, Receiver>;
type Log = Rc<RefCell<Vec<Seen>>>;

fn wrap(
    frames: Vec<Result<Frame<&'static [u8]>, &'static str>>,
    open: bool,
    verdict: Verdict,
) -> (Tested, Log) {
    wrap_events(frames, open, verdict, false)
}

fn wrap_events(
    frames: Vec<Result<Frame<&'static [u8]>, &'static str>>,
    open: bool,
    verdict: Verdict,
    events: bool,
) -> (Tested, Log) {
    let seen = Rc::new(RefCell::new(Vec::new()));
    let script = Script {
        frames: frames.into(),
        open,
    };
    let body = CompletionBody::new(script, Receiver(seen.clone()), verdict, events);
    (body, seen)
}

/// Polls `body` once: whether it gave a frame (`Some(true)`), an error
/// (`Some(false)`) or its end (`None`).
fn poll(body: &mut Tested) -> Option<bool> {
    let mut cx = Context::from_waker(Waker::noop());
    match Pin::new(body).poll_frame(&mut cx) {
        Poll::Ready(Some(frame)) => Some(frame.is_ok()),
        Poll::Ready(None) => None,
        Poll::Pending => unreachable!("scripted bodies are always ready"),
    }
}

fn deferred() -> Verdict {
    Classified::AtEnd(GrpcEosErrorsAsFailures::new())
}

#[test]
fn an_empty_body_completes_at_once() {
    let (body, seen) = wrap(vec![], false, Classified::Ready(Outcome::Failure));
    assert_eq!(*seen.borrow(), [Seen::Complete(Outcome::Failure)]);
    drop(body);
    assert_eq!(seen.borrow().len(), 1, "nothing more on drop");
    // Deferred, empty: ended without trailers.
    let (_, seen) = wrap(vec![], false, deferred());
    assert_eq!(*seen.borrow(), [Seen::Complete(Outcome::Failure)]);
}

#[test]
fn the_last_frame_completes_with_the_heads_verdict() {
    let (mut body, seen) = wrap(
        vec![data(), data()],
        false,
        Classified::Ready(Outcome::Success),
    );
    assert_eq!(poll(&mut body), Some(true));
    assert_eq!(*seen.borrow(), [Seen::FirstFrame], "in flight");
    assert_eq!(poll(&mut body), Some(true));
    assert_eq!(
        *seen.borrow(),
        [Seen::FirstFrame, Seen::Complete(Outcome::Success)],
        "the frame after which the body is at its end"
    );
    assert_eq!(poll(&mut body), None);
    drop(body);
    assert_eq!(
        seen.borrow().len(),
        2,
        "dropped after its end: nothing more"
    );
}

#[test]
fn the_end_of_a_body_that_cannot_tell_ahead_completes_it() {
    // `None` after the last frame, the body unable to say so before.
    let (mut body, seen) = wrap(vec![data()], true, deferred());
    assert_eq!(poll(&mut body), Some(true));
    assert_eq!(*seen.borrow(), [Seen::FirstFrame]);
    assert_eq!(poll(&mut body), None);
    assert_eq!(
        *seen.borrow(),
        [Seen::FirstFrame, Seen::Complete(Outcome::Failure)],
        "a deferred verdict with no trailers"
    );
}

#[test]
fn trailers_decide_a_deferred_verdict() {
    for (code, outcome) in [
        ("0", Outcome::Success),
        ("8", Outcome::Overload),
        ("3", Outcome::Ignored),
    ] {
        let (mut body, seen) = wrap(vec![data(), trailers(code)], true, deferred());
        assert_eq!(poll(&mut body), Some(true));
        assert_eq!(poll(&mut body), Some(true));
        assert_eq!(
            *seen.borrow(),
            [Seen::FirstFrame, Seen::Complete(outcome)],
            "{code}"
        );
    }
    // A verdict the head gave is kept, whatever the trailers say.
    let (mut body, seen) = wrap(
        vec![trailers("14")],
        true,
        Classified::Ready(Outcome::Success),
    );
    assert_eq!(poll(&mut body), Some(true));
    assert_eq!(
        *seen.borrow(),
        [Seen::FirstFrame, Seen::Complete(Outcome::Success)]
    );
}

#[test]
fn a_body_error_is_a_failure_whatever_the_head_said() {
    let (mut body, seen) = wrap(
        vec![data(), Err("reset")],
        true,
        Classified::Ready(Outcome::Success),
    );
    assert_eq!(poll(&mut body), Some(true));
    assert_eq!(poll(&mut body), Some(false));
    assert_eq!(
        *seen.borrow(),
        [Seen::FirstFrame, Seen::Complete(Outcome::Failure)]
    );
    // An error first: no frame came.
    let (mut body, seen) = wrap(vec![Err("reset")], true, deferred());
    assert_eq!(poll(&mut body), Some(false));
    assert_eq!(*seen.borrow(), [Seen::Complete(Outcome::Failure)]);
    drop(body);
    assert_eq!(seen.borrow().len(), 1);
}

#[test]
fn a_body_dropped_before_its_end_completes_by_the_head() {
    // Decided at the head: that outcome, read or not (a 503 counts).
    let (body, seen) = wrap(vec![data()], true, Classified::Ready(Outcome::Failure));
    assert!(seen.borrow().is_empty(), "in flight");
    drop(body);
    assert_eq!(*seen.borrow(), [Seen::Complete(Outcome::Failure)]);
    // Deferred: the caller hung up before the status came.
    let (mut body, seen) = wrap(vec![data(), data()], true, deferred());
    assert_eq!(poll(&mut body), Some(true));
    drop(body);
    assert_eq!(
        *seen.borrow(),
        [Seen::FirstFrame, Seen::Complete(Outcome::Ignored)]
    );
}

#[test]
fn unwrapping_the_body_completes_it_as_a_drop() {
    let (body, seen) = wrap(vec![data()], true, Classified::Ready(Outcome::Overload));
    assert_eq!(body.get_ref().frames.len(), 1);
    let inner = body.into_inner();
    assert_eq!(*seen.borrow(), [Seen::Complete(Outcome::Overload)]);
    assert_eq!(inner.frames.len(), 1, "the inner body is untouched");
}

fn event(text: &'static str) -> Result<Frame<&'static [u8]>, &'static str> {
    Ok(Frame::data(text.as_bytes()))
}

/// The outcome of an event stream whose head succeeded: its frames read
/// to the end, or (`drop_after`) dropped after that many.
fn stream_outcome(
    frames: Vec<Result<Frame<&'static [u8]>, &'static str>>,
    drop_after: Option<usize>,
) -> Outcome {
    let n = frames.len();
    let (mut body, seen) = wrap_events(frames, false, Classified::Ready(Outcome::Success), true);
    for _ in 0..drop_after.unwrap_or(n + 1) {
        if poll(&mut body).is_none() {
            break;
        }
    }
    drop(body);
    let outcome = match seen.borrow().last() {
        Some(Seen::Complete(outcome)) => *outcome,
        other => panic!("not completed: {other:?}"),
    };
    outcome
}

#[test]
fn an_event_stream_succeeds_only_through_its_done_and_without_an_error() {
    const TOKEN: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n";
    const DONE: &str = "data: [DONE]\n\n";
    const ERROR: &str = "data: {\"error\": {\"message\": \"engine died\"}}\n\n";
    let whole = vec![event(TOKEN), event(TOKEN), event(DONE)];
    assert_eq!(stream_outcome(whole, None), Outcome::Success);
    let cut = vec![event(TOKEN), event(TOKEN)];
    assert_eq!(stream_outcome(cut, None), Outcome::Failure, "no [DONE]");
    let errored = vec![event(TOKEN), event(ERROR), event(DONE)];
    assert_eq!(stream_outcome(errored, None), Outcome::Failure);
    // The caller left: not the backend's failure, unless it had sent an
    // error already.
    let left = vec![event(TOKEN), event(TOKEN), event(DONE)];
    assert_eq!(stream_outcome(left, Some(1)), Outcome::Success);
    let left_after_error = vec![event(ERROR), event(TOKEN), event(DONE)];
    assert_eq!(stream_outcome(left_after_error, Some(1)), Outcome::Failure);
    // Not an event stream: the same bytes say nothing.
    let (mut body, seen) = wrap(
        vec![event(ERROR)],
        false,
        Classified::Ready(Outcome::Success),
    );
    assert_eq!(poll(&mut body), Some(true));
    assert_eq!(
        seen.borrow().last(),
        Some(&Seen::Complete(Outcome::Success))
    );
    // A head that failed stays failed; the scan never turns it around.
    let (mut body, seen) = wrap_events(
        vec![event(DONE)],
        false,
        Classified::Ready(Outcome::Failure),
        true,
    );
    assert_eq!(poll(&mut body), Some(true));
    assert_eq!(
        seen.borrow().last(),
        Some(&Seen::Complete(Outcome::Failure))
    );
}
