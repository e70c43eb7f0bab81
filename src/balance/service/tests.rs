//! The balancer's `Service` path, tested inside the crate: a clone's
//! sampler fed by its requests' start times.

use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Empty;
use tower::discover::ServiceList;
use tower::ServiceExt;

use super::*;
use crate::backend::BackendId;
use crate::balance::choose::sampler::MAX_SHIFT;

/// An endpoint that answers every request at once with an empty body.
#[derive(Clone, Copy, Debug)]
struct Ready;

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
fn request(model: &str, kind: &'static str) -> http::Request<()> {
    http::Request::post("/infer")
        .header("x-model-id", model)
        .header("x-request-kind", kind)
        .body(())
        .unwrap()
}

/// Sends `n` requests for one model through `balancer`, `every` apart
/// on the paused clock.
async fn send(balancer: &mut ModelBalancer<Ready>, n: usize, every: Duration) {
    for _ in 0..n {
        let req = request("llama", "inference");
        let response = balancer.ready().await.unwrap().call(req).await;
        drop(response.unwrap());
        tokio::time::advance(every).await;
    }
}

/// The `Service` path feeds each sampled request's start time to the
/// clone's sampler: a burst thins the sample, light traffic restores
/// it.
#[tokio::test(start_paused = true)]
async fn a_clone_samples_by_its_request_rate() {
    let backends = ServiceList::new([Backend::new(BackendId::new("gpu-0").unwrap(), Ready)]);
    let mut balancer = ModelBalancer::new(backends, BalanceConfig::default()).unwrap();
    assert_eq!(balancer.local.sample_shift(), 0, "a new clone samples all");
    send(&mut balancer, 2_000, Duration::from_micros(1)).await;
    assert_eq!(balancer.local.sample_shift(), MAX_SHIFT, "a burst");
    send(&mut balancer, 200, Duration::from_millis(1)).await;
    assert_eq!(balancer.local.sample_shift(), 0, "light traffic");
}
