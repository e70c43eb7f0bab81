//! The watch task behind an `Etcd` source: a snapshot, a watch from the
//! revision after it, a resume after every break, a fresh snapshot after a
//! compaction. It hands each batch of changes to the source over a
//! channel, and ends when the source is dropped.

use etcd_client::{Client, EventType, GetOptions, WatchOptions, WatchResponse};
use tokio::sync::mpsc;

use super::connect::{within, Backoff, Settings};
use super::counters::EtcdHandle;
use super::error::EtcdError;
use super::members::{Event, Members, MetaChange, Outcome};

/// The changes that bring the announced set to `revision`.
pub(super) struct Batch {
    pub(super) revision: i64,
    pub(super) changes: Vec<MetaChange>,
}

/// Keys read per page of a snapshot (all pages at one revision).
const PAGE: i64 = 1000;

/// Why a watch session ended.
enum End {
    /// The source is gone: the task ends.
    Closed,
    /// etcd compacted past the revision to resume from: take a snapshot.
    Compacted,
    /// The connection or the watch broke: resume after a backoff.
    Broken(String),
    /// etcd refused the user: resume after a backoff too (the password may
    /// be fixed in etcd), logged as an error.
    Refused(String),
}

/// How a failed call ends the session.
fn broken(error: etcd_client::Error) -> End {
    match EtcdError::from(error) {
        error @ EtcdError::Auth(_) => End::Refused(error.to_string()),
        error => End::Broken(error.to_string()),
    }
}

pub(super) struct Task {
    settings: Settings,
    members: Members,
    counters: EtcdHandle,
    out: mpsc::Sender<Batch>,
    /// Whether the next session starts with a snapshot.
    snapshot: bool,
    /// The endpoint the next session connects to: the next one after a
    /// break.
    at: usize,
}

impl Task {
    pub(super) fn new(settings: Settings, counters: EtcdHandle, out: mpsc::Sender<Batch>) -> Self {
        let members = Members::new(settings.prefix.clone()).with_allow(settings.allow.clone());
        Self {
            settings,
            members,
            counters,
            out,
            snapshot: true,
            at: 0,
        }
    }

    /// Sessions until the source is gone.
    pub(super) async fn run(mut self) {
        let (min, max) = (self.settings.backoff_min, self.settings.backoff_max);
        let mut backoff = Backoff::new(min, max);
        loop {
            match self.session(&mut backoff).await {
                End::Closed => return,
                End::Compacted => {
                    self.counters.add_compaction();
                    self.snapshot = true;
                    tracing::warn!(
                        revision = self.members.revision(),
                        "etcd: the watch's revision was compacted; reading a fresh snapshot"
                    );
                }
                End::Refused(error) => {
                    self.at = self.at.wrapping_add(1);
                    let wait = backoff.next_wait();
                    tracing::error!(%error, retry_ms = wait.as_millis() as u64, "etcd: the user was refused; the fleet stays as it is");
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = self.out.closed() => return,
                    }
                }
                End::Broken(error) => {
                    self.at = self.at.wrapping_add(1);
                    let wait = backoff.next_wait();
                    tracing::warn!(
                        %error,
                        revision = self.members.revision(),
                        retry_ms = wait.as_millis() as u64,
                        "{}",
                        if self.snapshot {
                            "etcd: could not read a snapshot; trying again"
                        } else {
                            "etcd: watch broken; resuming after the last applied revision"
                        }
                    );
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = self.out.closed() => return,
                    }
                }
            }
        }
    }

    /// One connection: a snapshot if due, then the watch until it ends.
    async fn session(&mut self, backoff: &mut Backoff) -> End {
        let mut client = match self.settings.connect(self.at).await {
            Ok(client) => client,
            Err(error) => return broken(error),
        };
        // A watch that starts without a snapshot takes up where a broken
        // one left off: a resume, counted once etcd has created it.
        let resuming = !self.snapshot;
        if self.snapshot {
            match self.read_snapshot(&mut client).await {
                Ok(changes) => {
                    if self.hand_over(changes).await.is_err() {
                        return End::Closed;
                    }
                }
                Err(error) => return broken(error),
            }
            self.snapshot = false;
        }
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(self.members.revision() + 1)
            .with_progress_notify();
        let prefix = self.settings.prefix.clone();
        let watch = within(self.settings.timeout, client.watch(prefix, Some(options)));
        let mut stream = match watch.await {
            Ok(stream) => stream,
            Err(error) => return broken(error),
        };
        loop {
            let message = tokio::select! {
                message = stream.message() => message,
                () = self.out.closed() => return End::Closed,
            };
            let response = match message {
                Ok(Some(response)) => response,
                Ok(None) => return End::Broken("the watch stream ended".into()),
                Err(error) => return broken(error),
            };
            if response.compact_revision() > 0 {
                return End::Compacted;
            }
            if response.canceled() {
                let reason = response.cancel_reason();
                return End::Broken(format!("the watch was cancelled: {reason}"));
            }
            if response.created() {
                backoff.reset();
                if resuming {
                    self.counters.add_resume();
                }
            }
            if self.apply(&response).await.is_err() {
                return End::Closed;
            }
        }
    }

    /// A consistent snapshot of the prefix: every page read at the first
    /// page's revision; the changes it makes.
    async fn read_snapshot(
        &mut self,
        client: &mut Client,
    ) -> Result<Vec<MetaChange>, etcd_client::Error> {
        let end = self.settings.range_end();
        let mut kvs: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut from = self.settings.prefix.clone();
        let mut revision = 0;
        loop {
            let mut options = GetOptions::new().with_range(end.clone()).with_limit(PAGE);
            if revision > 0 {
                options = options.with_revision(revision);
            }
            let call = client.get(from.clone(), Some(options));
            let page = within(self.settings.timeout, call).await?;
            if revision == 0 {
                revision = page.header().map_or(0, |h| h.revision());
            }
            kvs.extend(
                page.kvs()
                    .iter()
                    .map(|kv| (kv.key().to_vec(), kv.value().to_vec())),
            );
            match kvs.last() {
                Some((last, _)) if page.more() => {
                    from = last.clone();
                    from.push(0);
                }
                _ => break,
            }
        }
        let mut outcome = Outcome::default();
        let pairs = kvs.iter().map(|(k, v)| (k.as_slice(), v.as_slice()));
        self.members.replace(revision, pairs, &mut outcome);
        self.counters.add_snapshot();
        self.counters.add_outcome(0, outcome.invalid, 0);
        tracing::debug!(
            revision,
            backends = self.members.len(),
            changes = outcome.changes.len(),
            "etcd: snapshot read"
        );
        Ok(outcome.changes)
    }

    /// Applies a watch response and hands its changes over.
    async fn apply(&mut self, response: &WatchResponse) -> Result<(), Closed> {
        if response.events().is_empty() {
            // A progress notification (or the watch's creation): nothing
            // changed up to the header's revision. Only a notification,
            // not a creation, says every event before it was sent.
            if !response.created() {
                if let Some(header) = response.header() {
                    self.members.advance(header.revision());
                    return self.hand_over(Vec::new()).await;
                }
            }
            return Ok(());
        }
        let events = response.events().iter().filter_map(|event| {
            let kv = event.kv()?;
            let key_event = match event.event_type() {
                EventType::Put => Event::Put(kv.key(), kv.value()),
                EventType::Delete => Event::Delete(kv.key()),
            };
            Some((kv.mod_revision(), key_event))
        });
        let mut outcome = Outcome::default();
        self.members.apply(events, &mut outcome);
        let Outcome {
            changes,
            applied,
            stale,
            invalid,
        } = outcome;
        self.counters.add_outcome(applied, invalid, stale);
        if stale > 0 {
            tracing::warn!(
                stale,
                "etcd: dropped events at or below the applied revision"
            );
        }
        self.hand_over(changes).await
    }

    /// Sends the changes up to the revision applied to the source (none:
    /// the revision moved without a change), which records the revision
    /// once it has yielded them.
    async fn hand_over(&mut self, changes: Vec<MetaChange>) -> Result<(), Closed> {
        let revision = self.members.revision();
        let batch = Batch { revision, changes };
        self.out.send(batch).await.map_err(|_| Closed)
    }
}

/// The source was dropped.
struct Closed;
