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
                    let blocks = PromptBlocks::new(&tokens, block_size);
                    parts.extensions.insert(blocks);
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

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use tower::{service_fn, ServiceExt};

    use super::*;
    use crate::kv::tokenize::TokenizeFuture;
    use crate::route::ModelId;

    /// Token IDs from the body's bytes, one per byte; "fail" fails; a
    /// body starting with `{` has no prompt.
    struct Bytewise;

    impl Tokenize for Bytewise {
        fn tokenize<'a>(&'a self, _path: &'a str, body: &'a Bytes) -> TokenizeFuture<'a> {
            Box::pin(async move {
                match &body[..] {
                    b"fail" => Err("no tokenizer".into()),
                    [b'{', ..] => Ok(None),
                    bytes => Ok(Some(bytes.iter().map(|&b| u32::from(b)).collect())),
                }
            })
        }
    }

    /// What reached the inner service: its blocks and prefix key.
    async fn through(
        layer: &PromptBlocksLayer,
        body: &'static str,
        routed: bool,
    ) -> (Option<PromptBlocks>, Option<crate::route::PrefixKey>, Bytes) {
        let inner = service_fn(|req: Request<Full<Bytes>>| async move {
            let blocks = req.extensions().get::<PromptBlocks>().cloned();
            let prefix = req.extensions().get::<RouteInfo>().and_then(|r| r.prefix);
            let body = req.into_body().collect().await.unwrap().to_bytes();
            Ok::<_, Infallible>((blocks, prefix, body))
        });
        let mut req = Request::new(Full::new(Bytes::from_static(body.as_bytes())));
        if routed {
            req.extensions_mut()
                .insert(RouteInfo::new(ModelId::new("tiny").unwrap()));
        }
        layer.layer(inner).oneshot(req).await.unwrap()
    }

    #[tokio::test]
    async fn a_routed_prompt_gets_its_blocks() {
        let index = KvIndex::default();
        let layer = PromptBlocksLayer::new(Bytewise, index.clone());
        // No event gave the block size yet: untouched.
        assert_eq!(through(&layer, "abcdefgh", true).await.0, None);
        index.learn_block_size(4);
        let (blocks, prefix, body) = through(&layer, "abcdefghi", true).await;
        let blocks = blocks.unwrap();
        assert_eq!(
            blocks,
            PromptBlocks::new(&[97, 98, 99, 100, 101, 102, 103, 104], 4)
        );
        assert_eq!(prefix, None, "the route's key is its own");
        assert_eq!(&body[..], b"abcdefghi", "the body goes on whole");
    }

    #[tokio::test]
    async fn no_route_no_prompt_or_a_failure_goes_on_without_blocks() {
        let index = KvIndex::default();
        index.learn_block_size(4);
        let layer = PromptBlocksLayer::new(Bytewise, index);
        assert_eq!(through(&layer, "abcdefgh", false).await.0, None);
        assert_eq!(through(&layer, "{\"input\": 1}", true).await.0, None);
        let (blocks, prefix, body) = through(&layer, "fail", true).await;
        assert_eq!((blocks, prefix), (None, None));
        assert_eq!(&body[..], b"fail");
        assert_eq!(layer.failures(), 1);
    }
}
