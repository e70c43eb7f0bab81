//! The harness the route fuzz targets and their proptest cases share
//! (`fuzz_route.rs` for headers, `fuzz_body.rs` for paths and bodies):
//! the model ID rule, `ModelFromBodyLayer` in front of an echo service,
//! bodies in frames. The fuzz targets (`fuzz/`) and
//! `tests/config/fuzz_inputs.rs` both import them from this crate: one
//! definition of what must hold, checked by both.
//!
//! Nothing here needs a runtime: the bodies and the inner service are
//! always ready, so a future is polled to its end with a no-op waker.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::{ready, Future, Ready};
use std::pin::{pin, Pin};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::header::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use tower_layer::Layer;
use tower_model_balance::error::{BoxError, InvalidReason};
use tower_model_balance::route::{ModelFromBodyLayer, ModelId, RouteInfo};
use tower_service::Service;

/// Why `name` is not a valid model ID, by the documented rule (non-empty,
/// at most 256 bytes, no whitespace or control character), or `None`.
pub fn model_id_fault(name: &str) -> Option<InvalidReason> {
    if name.is_empty() {
        Some(InvalidReason::Empty)
    } else if name.len() > ModelId::MAX_LEN {
        Some(InvalidReason::TooLong(ModelId::MAX_LEN))
    } else if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some(InvalidReason::ForbiddenCharacter)
    } else {
        None
    }
}

/// An accepted model ID is valid, round-trips through [`ModelId::new`] and
/// carries the xxh3 hash of its bytes.
pub fn check_model(model: &ModelId, expected: &str) {
    assert_eq!(model.as_str(), expected);
    assert!(!model.as_str().is_empty());
    assert_eq!(model_id_fault(model.as_str()), None, "{model:?}");
    let again = ModelId::new(model.as_str()).expect("an accepted model ID is valid");
    assert_eq!(&again, model);
    assert_eq!(model.to_string().parse::<ModelId>().as_ref(), Ok(model));
    assert_eq!(
        model.hash64(),
        xxhash_rust::xxh3::xxh3_64(model.as_str().as_bytes())
    );
}

/// The layer under test, with `limit`.
pub fn layer(limit: usize) -> ModelFromBodyLayer {
    ModelFromBodyLayer::builder()
        .limit(limit)
        .build()
        .expect("a limit within range")
}

/// What the inner service was handed.
#[derive(Debug)]
pub struct Seen {
    /// The route the layer inserted, if any.
    pub route: Option<RouteInfo>,
    /// The body the layer read whole and passed on, collected.
    pub body: Bytes,
    /// The request's headers.
    pub headers: HeaderMap,
}

/// Runs `req` through `layer` in front of [`Echo`].
pub fn run_layer<B>(layer: &ModelFromBodyLayer, req: http::Request<B>) -> Result<Seen, BoxError>
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let mut svc = layer.layer(Echo);
    let req = block_on(svc.call(req))?;
    let route = req.extensions().get::<RouteInfo>().cloned();
    let headers = req.headers().clone();
    let collected = block_on(req.into_body().collect()).unwrap_or_else(|e| match e {});
    Ok(Seen {
        route,
        body: collected.to_bytes(),
        headers,
    })
}

/// The inner service: hands back the request it got.
#[derive(Debug, Clone, Copy)]
pub struct Echo;

impl<R> Service<R> for Echo {
    type Response = R;
    type Error = Infallible;
    type Future = Ready<Result<R, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: R) -> Self::Future {
        ready(Ok(req))
    }
}

/// A body in frames of `chunk` bytes (one frame if 0), claiming `hint` as
/// its exact size if given.
pub struct Chunks {
    frames: VecDeque<Bytes>,
    hint: Option<u64>,
}

impl Chunks {
    /// `bytes` in frames of `chunk`.
    pub fn new(bytes: &[u8], chunk: usize, hint: Option<u64>) -> Self {
        let bytes = Bytes::copy_from_slice(bytes);
        let frames = match chunk {
            0 => VecDeque::from([bytes]),
            n => (0..bytes.len())
                .step_by(n)
                .map(|at| bytes.slice(at..bytes.len().min(at + n)))
                .collect(),
        };
        Self { frames, hint }
    }
}

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.frames.pop_front().map(|b| Ok(Frame::data(b))))
    }

    fn size_hint(&self) -> SizeHint {
        self.hint
            .map_or_else(SizeHint::default, SizeHint::with_exact)
    }
}

/// Polls `fut` to its end with a no-op waker: everything here is ready.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..1_000 {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
    }
    panic!("a future over ready bodies did not finish");
}
