//! A fixed list of backends.

use std::collections::{HashSet, VecDeque};
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;
use tower::discover::Change;

use crate::backend::{Backend, BackendId};
use crate::error::InvalidConfig;

/// A discovery source over a fixed list of backends.
///
/// Yields one `Change::Insert(id, backend)` per backend, in list order, and
/// then stays pending for ever: it never ends. A consumer that treats the
/// end of its source as a failure (or logs it) therefore sees a live,
/// quiet source — which is what a static fleet is. (tower's
/// `ServiceList`, by contrast, ends once it has yielded its services.)
///
/// Never yields an error (`Error = Infallible`). An empty list is accepted:
/// the balancer then has no backend and fails requests with
/// `NoHealthyBackend`.
///
/// ```
/// use tower_model_balance::backend::{Backend, BackendId};
/// use tower_model_balance::discover::Static;
///
/// let backend = |name: &str| Backend::new(BackendId::new(name).unwrap(), ());
/// let list = Static::new([backend("gpu-0"), backend("gpu-1")]).unwrap();
/// # let _ = list;
///
/// let error = Static::new([backend("gpu-0"), backend("gpu-0")]).unwrap_err();
/// assert_eq!(error.field, "backends");
/// ```
#[derive(Debug)]
pub struct Static<E> {
    backends: VecDeque<Backend<E>>,
}

impl<E> Static<E> {
    /// A source that inserts `backends`, in order.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming `backends` when two backends share an ID
    /// (keyed by ID, the second would replace the first in the balancer;
    /// a static list says what the fleet is, so that is a mistake in it,
    /// not something to drop quietly).
    pub fn new(backends: impl IntoIterator<Item = Backend<E>>) -> Result<Self, InvalidConfig> {
        let backends: VecDeque<_> = backends.into_iter().collect();
        let mut seen = HashSet::with_capacity(backends.len());
        if !backends.iter().all(|b| seen.insert(&b.meta.id)) {
            return Err(InvalidConfig::new("backends", "backends with distinct IDs"));
        }
        Ok(Self { backends })
    }
}

// No field is pinned.
impl<E> Unpin for Static<E> {}

impl<E> Stream for Static<E> {
    type Item = Result<Change<BackendId, Backend<E>>, Infallible>;

    fn poll_next(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match self.get_mut().backends.pop_front() {
            Some(backend) => {
                Poll::Ready(Some(Ok(Change::Insert(backend.meta.id.clone(), backend))))
            }
            // Nothing will ever change: no waker to keep.
            None => Poll::Pending,
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.backends.len(), None)
    }
}
