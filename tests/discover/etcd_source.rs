//! What the etcd source tests share: records, writes, a source with a
//! short backoff, and its next changes as text, each within a deadline.

use std::time::Duration;

use etcd_client::Client;
use futures_util::StreamExt;
use tower::discover::Change;
use tower_model_balance::discover::etcd::{Etcd, EtcdHandle};
use tower_model_balance::endpoint::Origin;

/// How long one change may take to arrive (a resume after a cut included).
pub const CHANGE_WITHIN: Duration = Duration::from_secs(10);

/// A record of weight `weight` at a port nothing listens on.
pub fn record(weight: u32) -> String {
    format!(r#"{{"version":1,"address":"http://127.0.0.1:9","weight":{weight}}}"#)
}

pub async fn put(client: &mut Client, key: &str, value: &str) {
    client.put(key, value, None).await.unwrap();
}

/// A source on `url` under `prefix`, retrying after 20 to 200 ms; its
/// endpoints are nothing (these tests send no request).
pub fn source(url: &str, prefix: &str) -> (Etcd<()>, EtcdHandle) {
    let source = Etcd::builder([url], prefix)
        .backoff(Duration::from_millis(20), Duration::from_millis(200))
        .build(|_: &Origin| ())
        .unwrap();
    let counters = source.handle();
    (source, counters)
}

/// The next `n` changes, as `+id:weight` or `-id`.
pub async fn next_changes<E>(source: &mut Etcd<E>, n: usize) -> Vec<String> {
    let mut seen = Vec::with_capacity(n);
    while seen.len() < n {
        let next = tokio::time::timeout(CHANGE_WITHIN, source.next()).await;
        let Ok(Some(Ok(change))) = next else {
            panic!("no change within {CHANGE_WITHIN:?} after {seen:?}: {source:?}");
        };
        seen.push(match change {
            Change::Insert(id, backend) => format!("+{id}:{}", backend.meta.weight()),
            Change::Remove(id) => format!("-{id}"),
        });
    }
    seen
}
