//! An always-ready endpoint that answers at once and allocates nothing,
//! shared by the allocation test, the `balance` benchmark and the
//! balancer's own sampling test.

use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::Empty;
use tower::Service;

/// Answers every request at once with an empty body.
#[derive(Clone, Copy, Debug)]
pub struct Ready;

impl Service<http::Request<()>> for Ready {
    type Response = http::Response<Empty<Bytes>>;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Request<()>) -> Self::Future {
        std::future::ready(Ok(http::Response::new(Empty::new())))
    }
}

/// A request for `model` of `kind` (`inference` or `update`).
pub fn request(model: &str, kind: &'static str) -> http::Request<()> {
    http::Request::post("/infer")
        .header("x-model-id", model)
        .header("x-request-kind", kind)
        .body(())
        .unwrap()
}

/// A current-thread Tokio runtime that is never driven, to enter while a
/// balancer is built outside one (its constructor spawns; the tasks never
/// run, so they allocate nothing while allocations are counted).
pub fn idle_runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime")
    })
}
