//! [`PromptBlocksLayer`]: cuts each request's prompt into the blocks the
//! index keys, for the balancer behind.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use tower_layer::Layer;
use tower_service::Service;

use super::chain::PromptBlocks;
use super::index::KvIndex;
use super::tokenize::Tokenize;
use crate::error::common::BoxError;
use crate::route::RouteInfo;

/// Adds [`PromptBlocks`] to each routed request with a prompt, once the
/// fleet's block size is known (from the first KV-cache event): the
/// [`Tokenize`] source gives the prompt's token IDs, cut into full blocks
/// and hashed as the index keys them.
///
/// It goes between [`ModelFromBodyLayer`](crate::route::ModelFromBodyLayer),
/// which reads the body whole and routes it, and the balancer. A request
/// without a [`RouteInfo`] in its extensions (routed by header), or
/// before any event gave the block size, is handed on untouched and
/// untokenized: no cost where precise routing has nothing to say. A
/// prompt the source cannot tokenize is handed on without blocks (logged
/// at debug, counted in [`PromptBlocksLayer::failures`]): a routing hint
/// never fails a request.
#[derive(Clone)]
pub struct PromptBlocksLayer {
    tokenize: Arc<dyn Tokenize>,
    index: KvIndex,
    failures: Arc<AtomicU64>,
}

impl PromptBlocksLayer {
    /// Blocks from `tokenize`'s token IDs at `index`'s block size.
    pub fn new(tokenize: impl Tokenize, index: KvIndex) -> Self {
        Self {
            tokenize: Arc::new(tokenize),
            index,
            failures: Arc::default(),
        }
    }

    /// Prompts the source failed to tokenize, since the layer was made
    /// (shared by its services).
    pub fn failures(&self) -> u64 {
        self.failures.load(Relaxed)
    }
}

impl fmt::Debug for PromptBlocksLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PromptBlocksLayer")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl<S> Layer<S> for PromptBlocksLayer {
    type Service = PromptBlocksService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        PromptBlocksService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service of [`PromptBlocksLayer`]. `poll_ready` is the inner
/// service's; the future is boxed (it awaits the tokenizer).
#[derive(Clone, Debug)]
pub struct PromptBlocksService<S> {
    inner: S,
    layer: PromptBlocksLayer,
}

impl<S> PromptBlocksService<S> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

/// The response future of [`PromptBlocksService`].
pub type PromptBlocksFuture<T> = Pin<Box<dyn Future<Output = Result<T, BoxError>> + Send>>;

impl<S> Service<Request<Full<Bytes>>> for PromptBlocksService<S>
where
    S: Service<Request<Full<Bytes>>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = PromptBlocksFuture<S::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<Full<Bytes>>) -> Self::Future {
        let block_size = self.layer.index.block_size();
        let routed = req.extensions().get::<RouteInfo>().is_some();
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let (Some(block_size), true) = (block_size, routed) else {
            let future = inner.call(req);
            return Box::pin(async move { future.await.map_err(Into::into) });
        };
        let layer = self.layer.clone();
        Box::pin(async move {
            let (mut parts, body) = req.into_parts();
            // A `Full` body is one frame, ready: collecting it copies
            // nothing.
            let bytes = match body.collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(never) => match never {},
            };
            match layer.tokenize.tokenize(parts.uri.path(), &bytes).await {
                Ok(Some(tokens)) => {
                    parts
                        .extensions
                        .insert(PromptBlocks::new(&tokens, block_size));
                }
                Ok(None) => {}
                Err(err) => {
                    layer.failures.fetch_add(1, Relaxed);
                    tracing::debug!(%err, "prompt not tokenized: routed without its blocks");
                }
            }
            let req = Request::from_parts(parts, Full::new(bytes));
            inner.call(req).await.map_err(Into::into)
        })
    }
}
