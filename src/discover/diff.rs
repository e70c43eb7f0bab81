//! The set difference behind `Watch` and `Dns`: the backends announced so
//! far, and the changes that turn them into a new set.

use std::collections::{BTreeMap, HashSet, VecDeque};

use tower::discover::Change;

use crate::backend::BackendId;
use crate::backend::{Backend, BackendMeta};

/// The backends announced so far, by ID (ordered, so removals come out in
/// a deterministic order).
#[derive(Debug, Default)]
pub(super) struct Known {
    metas: BTreeMap<BackendId, BackendMeta>,
}

impl Known {
    /// Queues the changes that turn the announced set into `next`:
    /// `Remove` for every ID gone (in ID order), then `Insert` for every new
    /// ID and every ID whose metadata changed (in `next`'s order). An
    /// unchanged backend yields nothing. `next` must hold distinct IDs.
    ///
    /// `make` turns an entry of `next` into the inserted backend; it is
    /// called only for the entries inserted.
    pub(super) fn diff<'a, T: 'a, E>(
        &mut self,
        next: impl IntoIterator<Item = &'a T>,
        meta: impl Fn(&T) -> &BackendMeta,
        make: impl Fn(&T) -> Backend<E>,
        out: &mut VecDeque<Change<BackendId, Backend<E>>>,
    ) {
        let next: Vec<&T> = next.into_iter().collect();
        let live: HashSet<&BackendId> = next.iter().map(|t| meta(t).id()).collect();
        let gone: Vec<BackendId> = self
            .metas
            .keys()
            .filter(|id| !live.contains(id))
            .cloned()
            .collect();
        for id in gone {
            self.metas.remove(&id);
            tracing::debug!(backend = %id, "discovery: backend gone");
            out.push_back(Change::Remove(id));
        }
        for entry in next {
            let m = meta(entry);
            if self.metas.get(m.id()) == Some(m) {
                continue;
            }
            self.metas.insert(m.id().clone(), m.clone());
            out.push_back(Change::Insert(m.id().clone(), make(entry)));
        }
    }

    /// How many backends are announced.
    pub(super) fn len(&self) -> usize {
        self.metas.len()
    }
}

/// Keeps the first backend of each ID in `set`; returns the indices kept
/// and how many entries were dropped as duplicates.
pub(super) fn first_of_each<E>(set: &[Backend<E>]) -> (Vec<usize>, usize) {
    let mut seen = HashSet::with_capacity(set.len());
    let mut kept = Vec::with_capacity(set.len());
    for (i, backend) in set.iter().enumerate() {
        if seen.insert(&backend.meta.id) {
            kept.push(i);
        }
    }
    let dropped = set.len() - kept.len();
    (kept, dropped)
}
