//! Reading a server-sent-event stream for what its status cannot say: an
//! error sent inside a `200` stream, and a stream that ended before its
//! terminal event.
//!
//! OpenAI-compatible servers (vLLM, SGLang, TGI's Messages API, llama.cpp)
//! answer `stream: true` with `200` and `text/event-stream` at once, then
//! one `data:` event per chunk, then `data: [DONE]`. An engine that fails
//! after the head was sent can only say so inside the stream:
//!
//! | server | error event |
//! |---|---|
//! | OpenAI, SGLang, vLLM ≥ 0.6 | `data: {"error": {"message": …, "type": …, "code": …}}` |
//! | vLLM before 0.6 | `data: {"object": "error", "message": …}` |
//! | TGI | `data: {"error": "…", "error_type": "…"}` |
//! | typed SSE events | `event: error` |
//!
//! [`SseScan`] reads the stream's frames as they pass, line by line, with
//! no allocation: it keeps the first [`LINE`] bytes of the current line,
//! which hold the start of every shape above.

use std::io::IoSlice;

use bytes::Buf;
use http::HeaderMap;

/// Bytes of each line kept: enough for `data: {"object": "error"` and the
/// start of every shape in the [module docs](self).
pub(crate) const LINE: usize = 48;

/// What a stream's events said, read as its frames pass.
#[derive(Debug, Clone)]
pub(crate) struct SseScan {
    line: [u8; LINE],
    len: usize,
    error: bool,
    done: bool,
    /// `data:` lines read that are neither `[DONE]` nor an error: the
    /// stream's chunks (on vLLM and SGLang one token each).
    events: u32,
}

/// Whether a response's head says it is a server-sent-event stream
/// (`content-type: text/event-stream`, any parameters, any case).
pub(crate) fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("text/event-stream"))
}

impl SseScan {
    pub(crate) fn new() -> Self {
        Self {
            line: [0; LINE],
            len: 0,
            error: false,
            done: false,
            events: 0,
        }
    }

    /// Reads one data frame's bytes, not consuming them: its first 16
    /// chunks (a frame from hyper, `Bytes`, is one chunk).
    pub(crate) fn frame(&mut self, data: &impl Buf) {
        if self.done || self.error {
            return;
        }
        let mut slices = [IoSlice::new(&[]); 16];
        let n = data.chunks_vectored(&mut slices);
        for slice in &slices[..n] {
            self.bytes(slice);
        }
    }

    /// Keeps the first [`LINE`] bytes of each line; judges it at its end.
    fn bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if b == b'\n' || b == b'\r' {
                self.end_of_line();
            } else if self.len < LINE {
                self.line[self.len] = b;
                self.len += 1;
            }
        }
    }

    /// Judges the line kept so far and starts the next.
    fn end_of_line(&mut self) {
        let line = &self.line[..self.len];
        self.len = 0;
        if let Some(payload) = field(line, b"data:") {
            if payload.starts_with(b"[DONE]") {
                self.done = true;
            } else if payload.starts_with(b"{\"error\"")
                || contains(payload, b"\"object\":\"error\"")
                || contains(payload, b"\"object\": \"error\"")
            {
                self.error = true;
            } else {
                self.events = self.events.saturating_add(1);
            }
        } else if field(line, b"event:").is_some_and(|name| name == b"error") {
            self.error = true;
        }
    }

    /// Whether the stream failed: an error event, or (at its end) no
    /// `data: [DONE]` before it. A line not ended by a newline when the
    /// body ends is judged first.
    #[cfg_attr(not(feature = "breaker"), allow(dead_code))]
    pub(crate) fn failed_at_end(&mut self) -> bool {
        if self.len > 0 {
            self.end_of_line();
        }
        self.error || !self.done
    }

    /// `data:` chunks read so far (lines ended), `[DONE]` and errors not
    /// counted; comments (`: keep-alive`) and other fields neither.
    pub(crate) fn events(&self) -> u32 {
        self.events
    }

    /// Whether `data: [DONE]` was read.
    #[cfg_attr(not(feature = "hedge"), allow(dead_code))]
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    /// Whether an error event was seen so far.
    pub(crate) fn errored(&self) -> bool {
        self.error
    }
}

/// The value of an SSE field `name` (with its colon) on `line`, its one
/// leading space dropped.
fn field<'a>(line: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let rest = line.strip_prefix(name)?;
    Some(rest.strip_prefix(b" ").unwrap_or(rest))
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn scan(frames: &[&str]) -> SseScan {
        let mut s = SseScan::new();
        for f in frames {
            s.frame(&Bytes::copy_from_slice(f.as_bytes()));
        }
        s
    }

    const CHUNK: &str = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n";

    #[test]
    fn a_stream_that_ends_with_done_succeeds() {
        assert!(!scan(&[CHUNK, CHUNK, "data: [DONE]\n\n"]).failed_at_end());
        // CRLF line ends, and [DONE] without a final newline.
        assert!(!scan(&["data: x\r\n\r\n", "data: [DONE]"]).failed_at_end());
    }

    #[test]
    fn a_stream_cut_before_done_fails() {
        assert!(scan(&[CHUNK, CHUNK]).failed_at_end());
        assert!(scan(&[]).failed_at_end());
    }

    #[test]
    fn every_error_shape_fails() {
        for error in [
            "data: {\"error\": {\"message\": \"engine dead\", \"code\": 500}}\n\n",
            "data: {\"error\":{\"message\":\"x\",\"type\":\"InternalServerError\"}}\n\n",
            "data: {\"object\":\"error\",\"message\":\"x\",\"type\":\"BadRequestError\"}\n\n",
            "data: {\"object\": \"error\", \"message\": \"x\"}\n\n",
            "data: {\"error\":\"Request failed\",\"error_type\":\"generation\"}\n\n",
            "event: error\ndata: {\"message\":\"x\"}\n\n",
        ] {
            let mut s = scan(&[CHUNK, error, "data: [DONE]\n\n"]);
            assert!(s.errored(), "{error}");
            assert!(s.failed_at_end(), "{error}");
        }
    }

    #[test]
    fn lines_split_across_frames_are_joined() {
        let s = scan(&[CHUNK, "da", "ta: {\"err", "or\": {}}", "\n\n"]);
        assert!(s.errored());
        let mut s = scan(&[CHUNK, "data: [DO", "NE]\n"]);
        assert!(!s.failed_at_end());
    }

    #[test]
    fn chunks_are_counted_apart_from_comments_done_and_errors() {
        let s = scan(&[": keep-alive\n\n", CHUNK, "", CHUNK, "data: [DONE]\n\n"]);
        assert_eq!(s.events(), 2);
        assert!(s.is_done());
        let s = scan(&[": ping\n\n", "data: {\"erro"]);
        assert_eq!(s.events(), 0, "a line is counted at its end");
    }

    #[test]
    fn a_chunk_that_mentions_an_error_is_not_one() {
        // A token whose text is about errors: not at the payload's start.
        let token = "data: {\"choices\":[{\"delta\":{\"content\":\"{\\\"error\\\"\"}}]}\n\n";
        let mut s = scan(&[token, "data: [DONE]\n\n"]);
        assert!(!s.failed_at_end());
    }

    #[test]
    fn the_content_type_is_read_loosely() {
        let head = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(http::header::CONTENT_TYPE, v.parse().unwrap());
            is_event_stream(&h)
        };
        assert!(head("text/event-stream"));
        assert!(head("Text/Event-Stream; charset=utf-8"));
        assert!(!head("application/json"));
        assert!(!is_event_stream(&HeaderMap::new()));
    }
}
