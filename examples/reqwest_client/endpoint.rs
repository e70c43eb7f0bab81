//! A `reqwest::Client` as an endpoint the balancer and the layers take: a
//! `Service<http::Request<B>>` whose response is an
//! `http::Response<reqwest::Body>` (an `http_body::Body`, so outcomes are
//! recorded at the end of the stream). The whole adapter: reqwest
//! converts both ways itself.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tower::Service;

/// One `reqwest::Client` (its connection pool shared by every clone).
#[derive(Debug, Clone)]
pub struct ReqwestEndpoint(pub reqwest::Client);

impl<B: Into<reqwest::Body>> Service<http::Request<B>> for ReqwestEndpoint {
    type Response = http::Response<reqwest::Body>;
    type Error = reqwest::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let client = self.0.clone();
        let req = reqwest::Request::try_from(req);
        Box::pin(async move { Ok(client.execute(req?).await?.into()) })
    }
}
