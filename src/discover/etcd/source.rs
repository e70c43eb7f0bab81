//! [`Etcd`]: the source, announcing the changes its watch task hands it
//! as backends.

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

use super::connect::Settings;
use super::counters::EtcdHandle;
use super::members::MetaChange;
use super::task::{Batch, Task};
use crate::backend::Backend;
use crate::backend::BackendId;
use crate::endpoint::Origin;

type MakeEndpoint<E> = Arc<dyn Fn(&Origin) -> E + Send + Sync>;

/// Batches of changes in flight from the watch task to the source.
const BATCHES: usize = 16;

/// A discovery source that watches a key prefix in etcd: each key
/// `<prefix><backend id>` is a backend, its value the backend's record
/// (see [`encode_record`](super::encode_record) for the schema).
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
/// let counters = source.handle();
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
    counters: EtcdHandle,
}

impl<E> Etcd<E> {
    pub(super) fn new(settings: Settings, make_endpoint: MakeEndpoint<E>) -> Self {
        Self {
            settings: Some(settings),
            make_endpoint,
            batches: None,
            task: None,
            pending: VecDeque::new(),
            pending_revision: 0,
            counters: EtcdHandle::default(),
        }
    }

    /// A handle on this source's counters (revision, events, snapshots,
    /// resumes, compactions, invalid records), readable after the source
    /// was handed to a balancer.
    pub fn handle(&self) -> EtcdHandle {
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
        let task = Task::new(settings, self.counters.clone(), tx);
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
