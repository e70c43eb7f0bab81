//! What a server writes back: each answer's body whole, or cut off half-way
//! under a [`Fault::Reset`](super::Fault::Reset), or a streamed answer's
//! events one frame at a time ([`Stream`]).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Response;
use http_body::{Body, Frame, SizeHint};

use super::stream::Stream;

/// Marks an answer (in its extensions, which never reach the wire) to be
/// cut off half-way: [`Wire::of`] sends half its body, then breaks the
/// connection.
#[derive(Debug, Clone, Copy)]
pub(super) struct CutMidBody;

/// A response body as the server sends it.
#[derive(Debug)]
pub(super) enum Wire {
    /// A body sent whole (or cut half-way).
    Whole(Whole),
    /// A streamed answer's events.
    Stream(Stream),
}

/// A body sent whole, or cut off half-way.
#[derive(Debug)]
pub(super) struct Whole {
    /// The bytes not sent yet.
    rest: Option<Bytes>,
    /// The whole body's length, announced in `content-length`.
    len: u64,
    cut: Cut,
}

/// How a body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// Sent whole.
    No,
    /// Half sent; the next poll yields once, so that the server flushes
    /// the headers and that half to the socket.
    Pending,
    /// Half sent and flushed; the next poll fails, which makes the server
    /// close the connection.
    Now,
}

impl Wire {
    /// The answer as the server sends it: whole, or cut off half-way when
    /// marked [`CutMidBody`].
    pub(super) fn of(response: Response<Bytes>) -> Response<Self> {
        let cut = response.extensions().get::<CutMidBody>().is_some();
        response.map(|bytes| Self::Whole(Whole::of(bytes, cut)))
    }
}

impl Body for Wire {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            Self::Whole(whole) => Pin::new(whole).poll_frame(cx),
            Self::Stream(stream) => Pin::new(stream).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Whole(whole) => whole.is_end_stream(),
            Self::Stream(stream) => stream.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Whole(whole) => whole.size_hint(),
            Self::Stream(stream) => stream.size_hint(),
        }
    }
}

impl Whole {
    /// `bytes` to send whole, or half of them then a cut.
    fn of(bytes: Bytes, cut: bool) -> Self {
        let len = bytes.len() as u64;
        if cut {
            // At least one byte is kept back, so the body cannot end.
            let half = bytes.slice(..bytes.len() / 2);
            Self {
                rest: (!half.is_empty()).then_some(half),
                len: len.max(1),
                cut: Cut::Pending,
            }
        } else {
            Self {
                rest: (!bytes.is_empty()).then_some(bytes),
                len,
                cut: Cut::No,
            }
        }
    }
}

impl Body for Whole {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Some(bytes) = self.rest.take() {
            return Poll::Ready(Some(Ok(Frame::data(bytes))));
        }
        match self.cut {
            Cut::No => Poll::Ready(None),
            Cut::Pending => {
                self.cut = Cut::Now;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Cut::Now => Poll::Ready(Some(Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "connection cut mid-response (Fault::Reset)",
            )))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_none() && self.cut == Cut::No
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len)
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;

    use super::*;

    /// Polls `body` once.
    fn poll(body: &mut Wire) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        Pin::new(body).poll_frame(&mut cx)
    }

    fn data(frame: Poll<Option<Result<Frame<Bytes>, std::io::Error>>>) -> Bytes {
        match frame {
            Poll::Ready(Some(Ok(frame))) => frame.into_data().unwrap(),
            other => panic!("expected data, got {other:?}"),
        }
    }

    #[test]
    fn a_whole_body_is_sent_whole_and_ends() {
        let mut body = Wire::of(Response::new(Bytes::from_static(b"0123456789"))).into_body();
        assert_eq!(body.size_hint().exact(), Some(10));
        assert!(!body.is_end_stream());
        assert_eq!(&data(poll(&mut body))[..], b"0123456789");
        assert!(body.is_end_stream());
        assert!(matches!(poll(&mut body), Poll::Ready(None)));

        let empty = Wire::of(Response::new(Bytes::new())).into_body();
        assert!(empty.is_end_stream());
        assert_eq!(empty.size_hint().exact(), Some(0));
    }

    #[test]
    fn a_cut_body_sends_half_of_its_length_then_fails() {
        let mut response = Response::new(Bytes::from_static(b"0123456789"));
        response.extensions_mut().insert(CutMidBody);
        let mut body = Wire::of(response).into_body();
        assert_eq!(body.size_hint().exact(), Some(10), "the whole length");
        assert_eq!(&data(poll(&mut body))[..], b"01234");
        assert!(!body.is_end_stream());
        assert!(poll(&mut body).is_pending(), "a pause to flush the half");
        match poll(&mut body) {
            Poll::Ready(Some(Err(error))) => {
                assert_eq!(error.kind(), std::io::ErrorKind::ConnectionReset)
            }
            other => panic!("expected the cut, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_cut_empty_body_still_fails() {
        let mut response = Response::new(Bytes::new());
        response.extensions_mut().insert(CutMidBody);
        let mut body = Wire::of(response).into_body();
        assert!(!body.is_end_stream());
        assert_eq!(body.size_hint().exact(), Some(1));
        let frame = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        assert!(matches!(frame, Some(Err(_))));
    }
}
