//! Membership and residency from etcd (feature `etcd`): a discovery source
//! watching a key prefix, and the registration of backends under leases.
//!
//! ```
//! use tower_model_balance::backend::BackendId;
//! use tower_model_balance::balance::BackendMeta;
//! use tower_model_balance::discover::etcd::{decode_record, encode_record, Etcd};
//! use tower_model_balance::endpoint::Origin;
//! use tower_model_balance::route::ModelId;
//!
//! # fn main() -> Result<(), tower::BoxError> {
//! // What a backend (or its sidecar) writes under `<prefix><id>`:
//! let gpu0 = BackendMeta::new(BackendId::new("gpu-0")?)
//!     .with_address(Origin::parse("http://10.0.0.7:8000")?)
//!     .with_resident_models([ModelId::new("llama-3-8b")?]);
//! let value = encode_record(&gpu0)?;
//! assert_eq!(
//!     value,
//!     r#"{"version":1,"address":"http://10.0.0.7:8000","weight":1,"model_slots":4,"models":["llama-3-8b"]}"#
//! );
//! // What every gateway replica reads back.
//! assert_eq!(decode_record(BackendId::new("gpu-0")?, value.as_bytes())?, gpu0);
//!
//! // A source is checked when built; it connects when first polled.
//! let bad = Etcd::builder(["http://127.0.0.1:2379"], "").build(|_: &Origin| ());
//! assert_eq!(bad.unwrap_err().field, "prefix");
//! # Ok(()) }
//! ```
//!
//! Every gateway replica that watches the same prefix with the same
//! balancer configuration (seed, vnodes, weights) computes the same owners
//! for every model: the ring is a function of the membership, and etcd
//! gives every watcher the same history in the same order. Behind the
//! source ([`Etcd`]):
//!
//! * **a consistent start**: a range read of the prefix, paged, every page
//!   at the first page's revision;
//! * **a watch from the revision after it**, which yields a `Change` per
//!   put (an `Insert`, when the record differs from the one announced) and
//!   per delete or lease expiry (a `Remove`);
//! * **a resume after every break** (connection lost, etcd restarted, the
//!   watch cancelled) from the revision after the last applied, so no
//!   change is missed or replayed ([`EtcdCounters::stale_events`] checks
//!   the second);
//! * **a fresh snapshot after a compaction** (the resume's revision is
//!   gone), diffed against what was announced: only real differences are
//!   yielded, so the fleet does not flap.
//!
//! A value that does not decode ([`RecordError`]) is skipped, logged and
//! counted, and that backend is out of the fleet until its record is valid:
//! the fleet is a function of the store's records alone, so a replica that
//! has watched for a day and one started a second ago agree. [`Registration`] is the
//! writer's side: a record under a lease that is kept alive, so a backend
//! that dies leaves every replica's ring at most a TTL after its last
//! renewal (plus etcd's expiry check, every 500 ms).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_core::Stream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tower::discover::Change;

use crate::backend::Backend;
use crate::backend::BackendId;
use crate::endpoint::Origin;

mod builder;
mod connect;
mod counters;
mod error;
mod members;
mod record;
mod register;
mod task;

pub use self::builder::EtcdBuilder;
pub use self::counters::EtcdCounters;
pub use self::error::EtcdError;
pub use self::record::{decode_record, encode_record, RecordError, SCHEMA_VERSION};
pub use self::register::{Registration, RegistrationBuilder};

use self::connect::Settings;
use self::members::MetaChange;

type MakeEndpoint<E> = Arc<dyn Fn(&Origin) -> E + Send + Sync>;

/// Batches of changes in flight from the watch task to the source.
const BATCHES: usize = 16;

/// The changes that bring the announced set to `revision`.
struct Batch {
    revision: i64,
    changes: Vec<MetaChange>,
}

/// A discovery source that watches a key prefix in etcd: each key
/// `<prefix><backend id>` is a backend, its value the backend's record
/// (see [`encode_record`] for the schema).
///
/// Built with [`Etcd::builder`]; the watch task starts when the source is
/// first polled (inside a tokio runtime, as the balancer's discovery task
/// polls it) and ends when the source is dropped. Never yields an error,
/// and never ends but when polled outside a tokio runtime (logged as an
/// error): while etcd is away the fleet stays as last announced.
///
/// ```no_run
/// use std::time::Duration;
///
/// use tower_model_balance::balance::{BalanceConfig, ModelBalancer};
/// use tower_model_balance::discover::etcd::Etcd;
/// use tower_model_balance::endpoint::{Origin, SetOrigin};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), tower::BoxError> {
/// # let client = tower::service_fn(|_req: http::Request<String>| async {
/// #     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
/// # });
/// // `client` is one HTTP client for every backend (hyper-util's, say).
/// let source = Etcd::builder(["http://etcd-0:2379", "http://etcd-1:2379"], "/inference/backends/")
///     .backoff(Duration::from_millis(100), Duration::from_secs(5))
///     .build(move |origin: &Origin| SetOrigin::to(client.clone(), origin.clone()))?;
/// let counters = source.counters();
/// let balancer = ModelBalancer::new(source, BalanceConfig::default())?;
/// # drop((balancer, counters)); Ok(()) }
/// ```
pub struct Etcd<E> {
    /// Until first polled: what the watch task needs.
    settings: Option<Settings>,
    make_endpoint: MakeEndpoint<E>,
    batches: Option<mpsc::Receiver<Batch>>,
    task: Option<JoinHandle<()>>,
    pending: VecDeque<MetaChange>,
    /// The revision the pending changes bring the set to.
    pending_revision: i64,
    counters: EtcdCounters,
}

impl Etcd<()> {
    /// A builder for a source on etcd's client `endpoints` (such as
    /// `http://127.0.0.1:2379`; several for a cluster) watching the keys
    /// under `prefix` (such as `/inference/backends/`). Validated by
    /// [`EtcdBuilder::build`].
    pub fn builder(
        endpoints: impl IntoIterator<Item = impl Into<String>>,
        prefix: impl Into<String>,
    ) -> EtcdBuilder {
        EtcdBuilder::new(
            endpoints.into_iter().map(Into::into).collect(),
            prefix.into(),
        )
    }
}

impl<E> Etcd<E> {
    fn new(settings: Settings, make_endpoint: MakeEndpoint<E>) -> Self {
        Self {
            settings: Some(settings),
            make_endpoint,
            batches: None,
            task: None,
            pending: VecDeque::new(),
            pending_revision: 0,
            counters: EtcdCounters::default(),
        }
    }

    /// A handle on this source's counters (revision, events, snapshots,
    /// resumes, compactions, invalid records), readable after the source
    /// was handed to a balancer.
    pub fn counters(&self) -> EtcdCounters {
        self.counters.clone()
    }

    /// Starts the watch task, once, on the current runtime.
    fn start(&mut self) -> Result<(), ()> {
        let Some(settings) = self.settings.take() else {
            return Ok(());
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::error!(
                "etcd: the source was polled outside a tokio runtime; it announces nothing"
            );
            return Err(());
        };
        let (tx, rx) = mpsc::channel(BATCHES);
        let task = task::Task::new(settings, self.counters.clone(), tx);
        self.task = Some(runtime.spawn(task.run()));
        self.batches = Some(rx);
        Ok(())
    }
}

impl<E> Drop for Etcd<E> {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

// No field is pinned.
impl<E> Unpin for Etcd<E> {}

impl<E> Stream for Etcd<E> {
    type Item = Result<Change<BackendId, Backend<E>>, Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.start().is_err() {
            return Poll::Ready(None);
        }
        loop {
            if let Some(change) = this.pending.pop_front() {
                if this.pending.is_empty() {
                    this.counters.set_revision(this.pending_revision);
                }
                let change = match change {
                    Change::Insert(id, meta) => {
                        // A decoded record always has an address.
                        let Some(origin) = meta.address() else {
                            continue;
                        };
                        let endpoint = (this.make_endpoint)(origin);
                        Change::Insert(id, Backend::with_meta(meta, endpoint))
                    }
                    Change::Remove(id) => Change::Remove(id),
                };
                return Poll::Ready(Some(Ok(change)));
            }
            let Some(batches) = &mut this.batches else {
                return Poll::Pending;
            };
            match batches.poll_recv(cx) {
                Poll::Ready(Some(Batch { revision, changes })) => {
                    if changes.is_empty() {
                        this.counters.set_revision(revision);
                    }
                    this.pending.extend(changes);
                    this.pending_revision = revision;
                }
                // The task ended (it only does when aborted, or panicked):
                // keep the fleet as announced.
                Poll::Ready(None) => {
                    this.batches = None;
                    return Poll::Pending;
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

impl<E> fmt::Debug for Etcd<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Etcd")
            .field("started", &self.task.is_some())
            .field("pending", &self.pending.len())
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}
