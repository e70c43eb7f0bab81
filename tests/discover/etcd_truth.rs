//! The ground truth of the etcd agreement test: the parent writes every
//! membership change to etcd with its own client, keeps the membership it
//! wrote, counts the events it made, and computes the digest every replica
//! must reach with a balancer of its own fed that membership through
//! `discover::Watch` (no staging: the digest of the settled ring).

use std::collections::BTreeMap;
use std::time::Duration;

use etcd_client::{Client, EventType, PutOptions, WatchOptions};
use tokio::time::Instant;
use tower_model_balance::backend::BackendId;
use tower_model_balance::balance::{Backend, BackendMeta, ModelBalancer, StagingConfig};
use tower_model_balance::discover::etcd::encode_record;
use tower_model_balance::discover::Watch;
use tower_model_balance::endpoint::Origin;
use tower_model_balance::route::ModelId;

use crate::etcd_replica::{config, digest};
use crate::ready::Ready;

/// A backend's record: its ID and weight, with an address of its own.
pub fn meta(id: &str, weight: u32) -> BackendMeta {
    let address = Origin::parse(&format!("http://{id}.pool-a:8000")).unwrap();
    BackendMeta::new(BackendId::new(id).unwrap())
        .with_address(address)
        .with_weight(weight)
        .unwrap()
}

/// The digest of `members` (ID → weight) settled: a fresh balancer given
/// the whole set at once, read once it holds every member.
pub async fn expected(members: &BTreeMap<String, u32>, models: &[ModelId]) -> u64 {
    let set: Vec<Backend<Ready>> = members
        .iter()
        .map(|(id, &weight)| Backend::with_meta(meta(id, weight), Ready))
        .collect();
    let (_publish, sets) = tokio::sync::watch::channel(set);
    let whole = StagingConfig::new(1.0, Duration::ZERO).unwrap();
    let balancer = ModelBalancer::new(Watch::new(sets), config(whole)).unwrap();
    let handle = balancer.handle();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut ids: Vec<String> = handle
            .backends()
            .iter()
            .map(|b| b.id.as_str().to_owned())
            .collect();
        ids.sort();
        if ids.iter().eq(members.keys()) {
            return digest(&handle, models);
        }
        assert!(
            Instant::now() < deadline,
            "the parent's balancer took no set"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The parent's writer: the membership it wrote and the events it made.
pub struct Truth {
    url: String,
    pub prefix: String,
    client: Client,
    /// ID → weight, as written.
    pub members: BTreeMap<String, u32>,
    /// Puts and deletes under the prefix (expiries among them), each one
    /// revision of etcd's.
    pub puts: u64,
    pub deletes: u64,
}

impl Truth {
    pub async fn connect(url: String, prefix: &str) -> Self {
        let client = Client::connect([url.as_str()], None).await.expect("etcd");
        Self {
            url,
            prefix: prefix.to_owned(),
            client,
            members: BTreeMap::new(),
            puts: 0,
            deletes: 0,
        }
    }

    /// A new connection (after etcd restarted: the old one's outcome for
    /// a write would be unknown).
    pub async fn reconnect(&mut self) {
        self.client = Client::connect([self.url.as_str()], None)
            .await
            .expect("etcd after its restart");
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn key(&self, id: &str) -> String {
        format!("{}{id}", self.prefix)
    }

    /// Puts `id`'s record with `weight` (a join or a weight change), under
    /// `lease` if given; when the write started, and its revision.
    pub async fn put(&mut self, id: &str, weight: u32, lease: Option<i64>) -> (Instant, i64) {
        let value = encode_record(&meta(id, weight)).unwrap();
        let options = lease.map(|lease| PutOptions::new().with_lease(lease));
        let at = Instant::now();
        let put = self.client.put(self.key(id), value, options).await;
        let revision = put.expect("put").header().unwrap().revision();
        self.members.insert(id.to_owned(), weight);
        self.puts += 1;
        (at, revision)
    }

    /// Deletes `id`'s record (a leave).
    pub async fn delete(&mut self, id: &str) -> Instant {
        let at = Instant::now();
        let deleted = self
            .client
            .delete(self.key(id), None)
            .await
            .expect("delete");
        assert_eq!(deleted.deleted(), 1, "{id} was there");
        self.members.remove(id);
        self.deletes += 1;
        at
    }

    /// A lease of `ttl_secs` that nothing keeps alive.
    pub async fn lease(&mut self, ttl_secs: i64) -> i64 {
        let grant = self.client.lease_grant(ttl_secs, None).await;
        grant.expect("lease").id()
    }

    /// Waits for the delete of `id`'s record after `revision` — the
    /// expiry of its lease — and takes it from the membership; when the
    /// parent saw it.
    pub async fn expiry(&mut self, id: &str, revision: i64) -> Instant {
        let options = WatchOptions::new().with_start_revision(revision + 1);
        let mut watch = self.client.watch(self.key(id), Some(options)).await;
        let watch = watch.as_mut().expect("watch");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let message = tokio::time::timeout_at(deadline, watch.message()).await;
            let message = message
                .expect("the lease expired within 10 s")
                .expect("watch");
            let message = message.expect("the watch goes on");
            if message
                .events()
                .iter()
                .any(|e| e.event_type() == EventType::Delete)
            {
                let at = Instant::now();
                self.members.remove(id);
                self.deletes += 1;
                return at;
            }
        }
    }

    /// A record put by someone else (a `Registration`): counted, and its
    /// revision.
    pub async fn adopt(&mut self, id: &str, weight: u32) -> i64 {
        let got = self.client.get(self.key(id), None).await.expect("get");
        let kv = got.kvs().first().expect("the record is there");
        self.members.insert(id.to_owned(), weight);
        self.puts += 1;
        kv.mod_revision()
    }

    /// A record deleted by someone else (a revoked lease): counted.
    pub fn disown(&mut self, id: &str) {
        self.members.remove(id);
        self.deletes += 1;
    }

    /// etcd's revision now.
    pub async fn revision(&mut self) -> i64 {
        let got = self.client.get(self.key(""), None).await.expect("get");
        got.header().unwrap().revision()
    }

    /// Compacts etcd's history up to `revision`.
    pub async fn compact(&mut self, revision: i64) {
        self.client.compact(revision, None).await.expect("compact");
    }
}
