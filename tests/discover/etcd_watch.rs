//! The etcd source against a real etcd (`etcd.rs` of `crates/test-support`): a snapshot,
//! then the watch; a watch cut mid-stream resumes with nothing lost or
//! replayed; a compacted revision is a fresh snapshot that yields only the
//! differences; an invalid record is no backend, as a fresh replica sees it.

use crate::etcd;
use crate::etcd_source;
use crate::tcp_cut;

use etcd::EtcdServer;
use etcd_client::Client;
use etcd_source::{next_changes, put, record, source};
use tcp_cut::CutProxy;

/// A real etcd and a client of it; `None` where etcd is not installed
/// (outside CI).
async fn start() -> Option<(EtcdServer, Client)> {
    let server = tokio::task::spawn_blocking(EtcdServer::start)
        .await
        .unwrap()?;
    let client = Client::connect([server.client_url()], None).await.unwrap();
    Some((server, client))
}

/// etcd's current revision.
async fn revision(client: &mut Client) -> i64 {
    let status = client.status().await.unwrap();
    status.header().unwrap().revision()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_starts_from_a_snapshot_then_follows_the_watch() {
    let Some((server, mut client)) = start().await else {
        return;
    };
    put(&mut client, "/fleet/gpu-1", &record(1)).await;
    put(&mut client, "/fleet/gpu-0", &record(2)).await;
    put(&mut client, "/fleet/broken", "{not json").await;
    put(&mut client, "/other/gpu-9", &record(1)).await;
    let (mut source, counters) = source(&server.client_url(), "/fleet/");
    // The snapshot, in ID order; the broken record and the other prefix
    // are not backends.
    let seen = next_changes(&mut source, 2).await;
    assert_eq!(seen, ["+gpu-0:2", "+gpu-1:1"]);
    assert_eq!(counters.stats().snapshots, 1);
    assert_eq!(counters.stats().invalid_records, 1);
    // Then the watch: a new weight, a repeat (no change), a delete.
    put(&mut client, "/fleet/gpu-1", &record(3)).await;
    put(&mut client, "/fleet/gpu-0", &record(2)).await;
    client.delete("/fleet/gpu-0", None).await.unwrap();
    put(&mut client, "/fleet/gpu-2", &record(1)).await;
    let seen = next_changes(&mut source, 3).await;
    assert_eq!(seen, ["+gpu-1:3", "-gpu-0", "+gpu-2:1"]);
    assert_eq!(counters.stats().revision, revision(&mut client).await);
    assert_eq!(counters.stats().events, 4);
    assert_eq!(counters.stats().stale_events, 0);
    // A bad write takes its backend out, as a replica starting now would
    // see it; a valid one puts it back.
    put(&mut client, "/fleet/gpu-2", r#"{"version":7}"#).await;
    assert_eq!(next_changes(&mut source, 1).await, ["-gpu-2"]);
    assert_eq!(counters.stats().invalid_records, 2);
    put(&mut client, "/fleet/gpu-2", &record(4)).await;
    assert_eq!(next_changes(&mut source, 1).await, ["+gpu-2:4"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_cut_mid_stream_resumes_without_a_loss_or_a_replay() {
    let Some((server, mut client)) = start().await else {
        return;
    };
    let proxy = CutProxy::start(server.client_addr());
    let (mut source, counters) = source(&proxy.url(), "/fleet/");
    put(&mut client, "/fleet/gpu-0", &record(1)).await;
    assert_eq!(next_changes(&mut source, 1).await, ["+gpu-0:1"]);
    // 40 writes, the watch cut four times among them.
    let mut expected = Vec::new();
    for i in 0..40u32 {
        let weight = 2 + i;
        put(&mut client, "/fleet/gpu-0", &record(weight)).await;
        expected.push(format!("+gpu-0:{weight}"));
        if i % 10 == 5 {
            proxy.cut();
        }
    }
    let seen = next_changes(&mut source, expected.len()).await;
    assert_eq!(seen, expected, "every write once, in order");
    assert!(counters.stats().resumes >= 1, "{counters:?}");
    assert_eq!(counters.stats().stale_events, 0);
    assert_eq!(counters.stats().snapshots, 1, "a resume, not a snapshot");
    assert_eq!(
        counters.stats().revision,
        revision(&mut client).await,
        "{counters:?}"
    );
    assert!(proxy.cuts() >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_revision_is_a_fresh_snapshot_that_yields_only_the_differences() {
    let Some((server, mut client)) = start().await else {
        return;
    };
    let proxy = CutProxy::start(server.client_addr());
    for i in 0..4 {
        put(&mut client, &format!("/fleet/gpu-{i}"), &record(1)).await;
    }
    let (mut source, counters) = source(&proxy.url(), "/fleet/");
    assert_eq!(next_changes(&mut source, 4).await.len(), 4);
    // While the source is cut off: one leaves, one changes, one is written
    // again unchanged, one joins, and the history is compacted away.
    proxy.pause();
    client.delete("/fleet/gpu-1", None).await.unwrap();
    put(&mut client, "/fleet/gpu-2", &record(5)).await;
    put(&mut client, "/fleet/gpu-3", &record(1)).await;
    put(&mut client, "/fleet/gpu-4", &record(1)).await;
    let now = revision(&mut client).await;
    client.compact(now, None).await.unwrap();
    proxy.resume();
    let seen = next_changes(&mut source, 3).await;
    assert_eq!(
        seen,
        ["-gpu-1", "+gpu-2:5", "+gpu-4:1"],
        "a diff, not a flap"
    );
    assert_eq!(counters.stats().compactions, 1);
    assert_eq!(counters.stats().snapshots, 2);
    assert_eq!(counters.stats().revision, now);
    // And the watch goes on after it.
    put(&mut client, "/fleet/gpu-0", &record(9)).await;
    assert_eq!(next_changes(&mut source, 1).await, ["+gpu-0:9"]);
    assert_eq!(counters.stats().stale_events, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_in_pages_and_the_writes_during_it_end_in_the_stores_state() {
    let Some((server, mut client)) = start().await else {
        return;
    };
    // 2 500 backends: three pages of the snapshot.
    for chunk in (0..2500).collect::<Vec<u32>>().chunks(100) {
        let ops: Vec<_> = chunk
            .iter()
            .map(|i| etcd_client::TxnOp::put(format!("/fleet/gpu-{i:04}"), record(1), None))
            .collect();
        client
            .txn(etcd_client::Txn::new().and_then(ops))
            .await
            .unwrap();
    }
    let (mut source, counters) = source(&server.client_url(), "/fleet/");
    // Writes race the snapshot: deletes, new weights and joins.
    let mut writer = client.clone();
    let writes = tokio::spawn(async move {
        for i in 0..200u32 {
            match i % 3 {
                0 => drop(
                    writer
                        .delete(format!("/fleet/gpu-{i:04}"), None)
                        .await
                        .unwrap(),
                ),
                1 => put(&mut writer, &format!("/fleet/gpu-{i:04}"), &record(7)).await,
                _ => put(&mut writer, &format!("/fleet/new-{i:04}"), &record(1)).await,
            }
        }
    });
    let mut fleet = std::collections::BTreeMap::new();
    writes.await.unwrap();
    let end = revision(&mut client).await;
    while counters.stats().revision < end {
        for change in next_changes(&mut source, 1).await {
            match change.split_once(':') {
                Some((id, weight)) => fleet.insert(id[1..].to_owned(), weight.to_owned()),
                None => fleet.remove(&change[1..]),
            };
        }
    }
    let store = client
        .get(
            "/fleet/",
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    let expected: std::collections::BTreeMap<String, String> = store
        .kvs()
        .iter()
        .map(|kv| {
            let id = kv
                .key_str()
                .unwrap()
                .trim_start_matches("/fleet/")
                .to_owned();
            let meta: serde_json::Value = serde_json::from_slice(kv.value()).unwrap();
            (id, meta["weight"].to_string())
        })
        .collect();
    assert_eq!(fleet.len(), 2500 - 67 + 66);
    assert_eq!(fleet, expected);
    assert_eq!(counters.stats().snapshots, 1);
    assert_eq!(counters.stats().stale_events, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_moves_past_a_dead_endpoint() {
    let Some((server, mut client)) = start().await else {
        return;
    };
    put(&mut client, "/fleet/gpu-0", &record(1)).await;
    // Nothing listens on port 9, the first endpoint.
    let source = tower_model_balance::discover::etcd::Etcd::builder(
        ["http://127.0.0.1:9".to_owned(), server.client_url()],
        "/fleet/",
    )
    .backoff(
        std::time::Duration::from_millis(20),
        std::time::Duration::from_millis(200),
    )
    .build(|_: &tower_model_balance::endpoint::Origin| ())
    .unwrap();
    let counters = source.handle();
    let mut source = source;
    assert_eq!(next_changes(&mut source, 1).await, ["+gpu-0:1"]);
    put(&mut client, "/fleet/gpu-1", &record(2)).await;
    assert_eq!(next_changes(&mut source, 1).await, ["+gpu-1:2"]);
    assert_eq!(counters.stats().stale_events, 0);
}
