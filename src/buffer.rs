//! A request body read whole under a limit in bytes: the one place the
//! crate buffers a body, for `route::ModelFromBody` (feature `body`) and
//! `hedge::BufferRequestBody` (feature `hedge`).
//!
//! A body longer than the limit fails at the frame that crosses it (as
//! `http_body_util::Limited` does): nothing is truncated, and no more than
//! the limit is held. The body's size hint is not trusted either way: a
//! client's claim is no reason to refuse bytes within the limit (a
//! `content-length` over it is the caller's to answer before reading, as
//! the gateway, `crates/gateway`, does with 413). A body's trailers are
//! dropped (the bytes go on as `Full<Bytes>`, which has none); a debug
//! event counts them.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http_body::Body;
use pin_project_lite::pin_project;

use crate::error::common::{BoxError, PayloadTooLarge};

/// Why a body was not read whole.
#[derive(Debug)]
pub(crate) enum Unread {
    /// Longer than the limit.
    TooLarge(PayloadTooLarge),
    /// The body's own error, boxed.
    Body(BoxError),
}

pin_project! {
    /// Reads a body whole, under a limit; see the [module docs](self).
    pub(crate) struct ReadWhole<B> {
        #[pin]
        body: B,
        limit: usize,
        // The first chunk, kept as it came (a body of one chunk, as a
        // gRPC message is, is not copied), then the chunks joined.
        first: Option<Bytes>,
        joined: BytesMut,
        read: usize,
    }
}

impl<B: Body> ReadWhole<B> {
    /// Reads `body`, at most `limit` bytes.
    pub(crate) fn new(body: B, limit: usize) -> Self {
        Self {
            body,
            limit,
            first: None,
            joined: BytesMut::new(),
            read: 0,
        }
    }
}

impl<B> Future for ReadWhole<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Output = Result<Bytes, Unread>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let too_large = Unread::TooLarge(PayloadTooLarge::new(*this.limit));
        while let Some(frame) = ready!(this.body.as_mut().poll_frame(cx)) {
            let frame = frame.map_err(|err| Unread::Body(err.into()))?;
            let mut data = match frame.into_data() {
                Ok(data) => data,
                Err(frame) => {
                    let trailers = frame.trailers_ref().map_or(0, http::HeaderMap::len);
                    tracing::debug!(trailers, "request body's trailers dropped");
                    continue;
                }
            };
            let len = data.remaining();
            if len > *this.limit - *this.read {
                return Poll::Ready(Err(too_large));
            }
            *this.read += len;
            let chunk = data.copy_to_bytes(len);
            match this.first.take() {
                None if this.joined.is_empty() => *this.first = Some(chunk),
                first => {
                    if let Some(first) = first {
                        this.joined.extend_from_slice(&first);
                    }
                    this.joined.extend_from_slice(&chunk);
                }
            }
        }
        let whole = match this.first.take() {
            Some(first) => first,
            None => std::mem::take(this.joined).freeze(),
        };
        Poll::Ready(Ok(whole))
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http_body_util::{Full, StreamBody};

    use super::{ReadWhole, Unread};
    use crate::error::PayloadTooLarge;

    fn frames(
        chunks: &[&'static str],
    ) -> impl http_body::Body<Data = Bytes, Error = std::io::Error> {
        let frames = chunks
            .iter()
            .map(|c| Ok(http_body::Frame::data(Bytes::from_static(c.as_bytes()))));
        StreamBody::new(futures_util::stream::iter(frames.collect::<Vec<_>>()))
    }

    #[tokio::test]
    async fn a_body_up_to_the_limit_is_read_whole() {
        let read = ReadWhole::new(frames(&["abc", "def"]), 6).await.unwrap();
        assert_eq!(read, "abcdef");
        let read = ReadWhole::new(Full::new(Bytes::new()), 0).await.unwrap();
        assert!(read.is_empty());
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_too_large() {
        let err = ReadWhole::new(frames(&["abc", "defg"]), 6)
            .await
            .unwrap_err();
        assert!(matches!(err, Unread::TooLarge(e) if e == PayloadTooLarge::new(6)));
    }

    /// A body that claims to be `claim` bytes long, whatever it holds.
    struct Lying(Full<Bytes>, u64);

    impl http_body::Body for Lying {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
            std::pin::Pin::new(&mut self.get_mut().0).poll_frame(cx)
        }

        fn size_hint(&self) -> http_body::SizeHint {
            http_body::SizeHint::with_exact(self.1)
        }
    }

    #[tokio::test]
    async fn a_size_hint_changes_nothing() {
        let claims_more = Lying(Full::new(Bytes::from_static(b"0123")), u64::MAX / 2);
        assert_eq!(ReadWhole::new(claims_more, 4).await.unwrap(), "0123");
        let claims_less = Lying(Full::new(Bytes::from_static(b"0123456789")), 0);
        let err = ReadWhole::new(claims_less, 9).await.unwrap_err();
        assert!(matches!(err, Unread::TooLarge(e) if e.limit == 9));
    }

    #[tokio::test]
    async fn a_body_error_is_returned_boxed() {
        let broken = futures_util::stream::iter([
            Ok(http_body::Frame::data(Bytes::from_static(b"ab"))),
            Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
        ]);
        let err = ReadWhole::new(StreamBody::new(broken), 64)
            .await
            .unwrap_err();
        let Unread::Body(err) = err else {
            panic!("not the body's error: {err:?}")
        };
        let io = err.downcast_ref::<std::io::Error>().unwrap();
        assert_eq!(io.kind(), std::io::ErrorKind::ConnectionReset);
    }

    #[tokio::test]
    async fn trailers_are_dropped() {
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-checksum", "1".parse().unwrap());
        let body = StreamBody::new(futures_util::stream::iter([
            Ok::<_, std::io::Error>(http_body::Frame::data(Bytes::from_static(b"ab"))),
            Ok(http_body::Frame::trailers(trailers)),
        ]));
        assert_eq!(ReadWhole::new(body, 64).await.unwrap(), "ab");
    }
}
