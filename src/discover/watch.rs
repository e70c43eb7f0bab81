//! Whole backend sets published on a `tokio::sync::watch` channel.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;
use tokio::sync::watch;
use tower::discover::Change;

use super::counters::DiscoverHandle;
use super::diff::{first_of_each, Known};
use crate::backend::Backend;
use crate::backend::BackendId;

type Changed<E> = Pin<
    Box<
        dyn Future<
                Output = (
                    watch::Receiver<Vec<Backend<E>>>,
                    Result<(), watch::error::RecvError>,
                ),
            > + Send,
    >,
>;

enum State<E> {
    /// Not waiting; the receiver is here.
    Idle(watch::Receiver<Vec<Backend<E>>>),
    /// Waiting for the next set; the receiver is inside the future.
    Waiting(Changed<E>),
    /// The sender is gone.
    Closed,
}

/// A discovery source over whole backend sets published on a
/// [`tokio::sync::watch`] channel — for registries of your own (a config
/// file watcher, a service-mesh API, a control plane) that know the fleet
/// as a list rather than as changes.
///
/// When first polled it inserts the set current then; on every set
/// published after, it yields the difference:
///
/// * `Remove(id)` for each ID no longer in the set (first, in ID order);
/// * `Insert(id, backend)` for each new ID, and for each ID whose
///   [`BackendMeta`](crate::backend::BackendMeta) changed (weight, model
///   slots, resident models, address, GPU memory) — the balancer updates
///   such a backend in place, keeping its breaker, health and in-flight
///   count;
/// * nothing for a backend whose metadata is unchanged. Endpoints cannot
///   be compared, so **a new endpoint with unchanged metadata is not
///   announced**; a backend that moved usually has a new
///   [`address`](crate::backend::BackendMeta::with_address), which is
///   metadata. To swap an endpoint alone, publish a set without the
///   backend, then one with it (its state starts afresh).
///
/// Sets published faster than they are polled are coalesced: only the
/// latest is compared with what was announced. A set with two backends of
/// one ID keeps the first, logs a `tracing` warning and counts the others
/// in [`DiscoverStats::duplicates`](super::DiscoverStats::duplicates). When the sender is dropped the stream ends
/// (`Poll::Ready(None)`) after yielding the changes of the last set; the
/// balancer then keeps the backends it has. Never yields an error.
///
/// The key of each change is the backend's ID.
pub struct Watch<E> {
    state: State<E>,
    started: bool,
    known: Known,
    pending: VecDeque<Change<BackendId, Backend<E>>>,
    counters: DiscoverHandle,
}

impl<E> Watch<E> {
    /// A source over the sets `receiver` sees.
    pub fn new(receiver: watch::Receiver<Vec<Backend<E>>>) -> Self {
        Self {
            state: State::Idle(receiver),
            started: false,
            known: Known::default(),
            pending: VecDeque::new(),
            counters: DiscoverHandle::default(),
        }
    }

    /// A handle on this source's counters, readable after the source was
    /// handed to a balancer.
    pub fn handle(&self) -> DiscoverHandle {
        self.counters.clone()
    }
}

impl<E: Clone> Watch<E> {
    /// Queues the changes from what was announced to `set`.
    fn update(&mut self, set: &[Backend<E>]) {
        let (kept, dropped) = first_of_each(set);
        if dropped > 0 {
            self.counters.add_duplicates(dropped);
            tracing::warn!(
                duplicates = dropped,
                "watched backend set holds duplicate IDs; the first of each is kept"
            );
        }
        self.known.diff(
            kept.iter().map(|&i| &set[i]),
            |b| &b.meta,
            |b| b.clone(),
            &mut self.pending,
        );
        tracing::debug!(backends = self.known.len(), "watched backend set applied");
    }
}

// No field is pinned (the future is boxed).
impl<E> Unpin for Watch<E> {}

impl<E> Stream for Watch<E>
where
    E: Clone + Send + Sync + 'static,
{
    type Item = Result<Change<BackendId, Backend<E>>, Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(change) = this.pending.pop_front() {
                return Poll::Ready(Some(Ok(change)));
            }
            match std::mem::replace(&mut this.state, State::Closed) {
                State::Idle(mut rx) if !this.started => {
                    this.started = true;
                    // Compared under the read lock: only inserted
                    // backends are cloned.
                    this.update(&rx.borrow_and_update());
                    this.state = State::Idle(rx);
                }
                State::Idle(mut rx) => {
                    this.state = State::Waiting(Box::pin(async move {
                        let changed = rx.changed().await;
                        (rx, changed)
                    }));
                }
                State::Waiting(mut changed) => match changed.as_mut().poll(cx) {
                    Poll::Pending => {
                        this.state = State::Waiting(changed);
                        return Poll::Pending;
                    }
                    Poll::Ready((mut rx, Ok(()))) => {
                        this.update(&rx.borrow_and_update());
                        this.state = State::Idle(rx);
                    }
                    Poll::Ready((_, Err(_closed))) => {
                        tracing::debug!("backend set sender dropped; discovery ends");
                        return Poll::Ready(None);
                    }
                },
                State::Closed => return Poll::Ready(None),
            }
        }
    }
}

impl<E> fmt::Debug for Watch<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::Idle(_) => "idle",
            State::Waiting(_) => "waiting",
            State::Closed => "closed",
        };
        f.debug_struct("Watch")
            .field("state", &state)
            .field("announced", &self.known.len())
            .field("pending", &self.pending.len())
            .field("counters", &self.counters)
            .finish()
    }
}
