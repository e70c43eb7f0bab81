//! `chwbl`: consistent hashing with bounded loads on a fixed prompt
//! prefix, as KubeAI's `PrefixHash` load-balancing strategy describes it
//! (KubeAI docs, "Load Balancing" and the `PrefixHash` fields of its Model
//! API: <https://www.kubeai.org/concepts/load-balancing/>, after Mirrokni,
//! Thorup and Zadimoghaddam, "Consistent Hashing with Bounded Loads",
//! 2018). Written from that description, not from KubeAI's code:
//!
//! - the key is the LoRA adapter's name (none here) followed by the first
//!   `prefixCharLength` characters (default 100) of the first `user`
//!   message of a chat completion, or of a completion's `prompt`;
//! - each endpoint has `replication` points on the ring (default 256);
//! - the walk starts at the key's hash and takes the first endpoint whose
//!   in-flight requests, this one counted, are within `meanLoadFactor`
//!   (default 125%) of the mean in-flight per endpoint, this one counted:
//!   `load + 1 ≤ (total + 1) ÷ endpoints × 1.25`; if none is, the first
//!   endpoint of the walk.
//!
//! A request is in flight until its response body ends (its stream read to
//! `[DONE]`) or is dropped.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use tower::{BoxError, Service, ServiceExt};
use tower_model_balance::backend::BackendId;
use xxhash_rust::xxh3::xxh3_64;

use crate::endpoint::Endpoint;

/// KubeAI's defaults.
pub const PREFIX_CHARS: usize = 100;
pub const REPLICATION: usize = 256;
pub const MEAN_LOAD_FACTOR: f64 = 1.25;

type BoxFuture<T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, BoxError>> + Send>>;

/// The strategy; cheap to clone (shared ring and counts).
#[derive(Clone)]
pub struct Chwbl {
    /// (point, endpoint index), sorted by point.
    ring: Arc<Vec<(u64, usize)>>,
    endpoints: Arc<Vec<Endpoint>>,
    in_flight: Arc<Vec<AtomicI64>>,
    total: Arc<AtomicI64>,
}

impl Chwbl {
    pub fn new(endpoints: Vec<(BackendId, Endpoint)>) -> Self {
        let mut ring = Vec::with_capacity(endpoints.len() * REPLICATION);
        for (i, (id, _)) in endpoints.iter().enumerate() {
            for replica in 0..REPLICATION {
                ring.push((xxh3_64(format!("{}{replica}", id.as_str()).as_bytes()), i));
            }
        }
        ring.sort_unstable();
        let in_flight = endpoints.iter().map(|_| AtomicI64::new(0)).collect();
        Self {
            ring: Arc::new(ring),
            endpoints: Arc::new(endpoints.into_iter().map(|(_, e)| e).collect()),
            in_flight: Arc::new(in_flight),
            total: Arc::new(AtomicI64::new(0)),
        }
    }

    /// The endpoint for `key`: the first on the walk within the bound.
    fn choose(&self, key: &[u8]) -> usize {
        let hash = xxh3_64(key);
        let start = self.ring.partition_point(|(point, _)| *point < hash) % self.ring.len();
        let n = self.endpoints.len() as f64;
        let total = self.total.load(Ordering::Relaxed);
        let bound = (total + 1) as f64 / n * MEAN_LOAD_FACTOR;
        let walk = self.ring[start..].iter().chain(&self.ring[..start]);
        let mut first = None;
        for &(_, i) in walk {
            first.get_or_insert(i);
            if total == 0 || (self.in_flight[i].load(Ordering::Relaxed) + 1) as f64 <= bound {
                return i;
            }
        }
        first.unwrap_or(0)
    }
}

/// KubeAI's key: the first 100 characters of the first user message (a
/// string content; otherwise empty), or of a completion's prompt.
pub fn key(body: &[u8]) -> String {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return String::new();
    };
    let text = if let Some(messages) = value.get("messages").and_then(|m| m.as_array()) {
        messages
            .iter()
            .find(|m| m.get("role").and_then(|r| r.as_str()) == Some("user"))
            .and_then(|m| m.get("content")?.as_str())
    } else {
        value.get("prompt").and_then(|p| p.as_str())
    };
    text.unwrap_or("").chars().take(PREFIX_CHARS).collect()
}

/// Takes one request off its endpoint's count when dropped.
struct InFlight {
    strategy: Chwbl,
    index: usize,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.strategy.in_flight[self.index].fetch_sub(1, Ordering::Relaxed);
        self.strategy.total.fetch_sub(1, Ordering::Relaxed);
    }
}

pub type GuardedBody = http_body_util::combinators::UnsyncBoxBody<Bytes, hyper::Error>;

impl Service<Request<Full<Bytes>>> for Chwbl {
    type Response = Response<GuardedBody>;
    type Error = BoxError;
    type Future = BoxFuture<Self::Response>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Full<Bytes>>) -> Self::Future {
        let strategy = self.clone();
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let bytes = body.collect().await?.to_bytes();
            let index = strategy.choose(key(&bytes).as_bytes());
            strategy.in_flight[index].fetch_add(1, Ordering::Relaxed);
            strategy.total.fetch_add(1, Ordering::Relaxed);
            let guard = InFlight {
                strategy: strategy.clone(),
                index,
            };
            let endpoint = strategy.endpoints[index].clone();
            let req = Request::from_parts(parts, Full::new(bytes));
            let rsp = endpoint.oneshot(req).await.map_err(BoxError::from)?;
            // The body carries the count until it ends or is dropped.
            Ok(rsp.map(move |body| {
                body.map_frame(move |frame| {
                    let _ = &guard;
                    frame
                })
                .boxed_unsync()
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_the_first_user_message_or_the_prompt() {
        let chat = br#"{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hello"}, {"role": "user", "content": "later"}]}"#;
        assert_eq!(key(chat), "hello");
        assert_eq!(key(br#"{"prompt": "abc"}"#), "abc");
        let long = format!(r#"{{"prompt": "{}"}}"#, "é".repeat(150));
        assert_eq!(key(long.as_bytes()).chars().count(), PREFIX_CHARS);
        assert_eq!(key(b"nope"), "");
    }
}
