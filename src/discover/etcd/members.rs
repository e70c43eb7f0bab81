//! What an etcd source has announced (pure logic): each backend's record,
//! the revision applied, and the changes that an event or a fresh
//! snapshot makes.

use std::collections::BTreeMap;

use tower::discover::Change;

use super::allow::AllowList;
use super::record::{decode_record, key_id, RecordError};
use crate::backend::BackendId;
use crate::backend::BackendMeta;

/// A change as the source yields it, before the endpoint is made.
pub(super) type MetaChange = Change<BackendId, BackendMeta>;

/// One key's event in a watch response.
#[derive(Debug, Clone, Copy)]
pub(super) enum Event<'a> {
    /// The key was written with this value.
    Put(&'a [u8], &'a [u8]),
    /// The key was deleted (or its lease expired).
    Delete(&'a [u8]),
}

/// What applying a response or a snapshot did.
#[derive(Debug, Default)]
pub(super) struct Outcome {
    /// The changes to yield, in order.
    pub(super) changes: Vec<MetaChange>,
    /// Events applied (above the revision applied before).
    pub(super) applied: u64,
    /// Events at or below the revision applied before: a replay, dropped.
    pub(super) stale: u64,
    /// Values that did not decode: no backend.
    pub(super) invalid: u64,
}

/// The backends announced so far, by ID, and the revision they are at.
#[derive(Debug)]
pub(super) struct Members {
    prefix: Vec<u8>,
    metas: BTreeMap<BackendId, BackendMeta>,
    revision: i64,
    allow: AllowList,
}

impl Members {
    /// Nothing announced, at revision 0 (before any snapshot).
    pub(super) fn new(prefix: Vec<u8>) -> Self {
        Self {
            prefix,
            metas: BTreeMap::new(),
            revision: 0,
            allow: AllowList::default(),
        }
    }

    /// Records whose addresses are outside `allow` are invalid.
    pub(super) fn with_allow(mut self, allow: AllowList) -> Self {
        self.allow = allow;
        self
    }

    /// The last revision applied: a resumed watch starts after it.
    pub(super) fn revision(&self) -> i64 {
        self.revision
    }

    /// How many backends are announced.
    pub(super) fn len(&self) -> usize {
        self.metas.len()
    }

    /// Applies one watch response's events, each with its key's
    /// modification revision. An event at or below the revision applied
    /// before the response is a replay and is dropped (a response may hold
    /// several events of one revision: a transaction).
    pub(super) fn apply<'a>(
        &mut self,
        events: impl IntoIterator<Item = (i64, Event<'a>)>,
        out: &mut Outcome,
    ) {
        let floor = self.revision;
        for (revision, event) in events {
            if revision <= floor {
                out.stale += 1;
                continue;
            }
            self.revision = self.revision.max(revision);
            out.applied += 1;
            match event {
                Event::Put(key, value) => self.put(key, value, out),
                Event::Delete(key) => self.delete(key, out),
            }
        }
    }

    /// A progress notification: nothing under the prefix changed up to
    /// `revision`.
    pub(super) fn advance(&mut self, revision: i64) {
        self.revision = self.revision.max(revision);
    }

    /// Replaces the announced set with a snapshot read at `revision`:
    /// `Remove` for every backend gone, `Insert` for every backend new or
    /// changed (each in ID order); an unchanged backend yields nothing, so
    /// a fresh snapshot after a compaction is a diff, not a flap. A value
    /// that does not decode is no backend, as in [`apply`](Self::apply).
    pub(super) fn replace<'a>(
        &mut self,
        revision: i64,
        kvs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
        out: &mut Outcome,
    ) {
        let mut next = BTreeMap::new();
        for (key, value) in kvs {
            match self.decode(key, value) {
                Ok(meta) => {
                    next.insert(meta.id().clone(), meta);
                }
                Err(_) => out.invalid += 1,
            }
        }
        for id in self.metas.keys().filter(|id| !next.contains_key(*id)) {
            out.changes.push(Change::Remove(id.clone()));
        }
        for (id, meta) in &next {
            if self.metas.get(id) != Some(meta) {
                out.changes.push(Change::Insert(id.clone(), meta.clone()));
            }
        }
        self.metas = next;
        self.revision = self.revision.max(revision);
    }

    /// A put. A value that does not decode is no backend: one announced
    /// under that key is removed. The fleet is then a function of the
    /// store's records alone, so a replica that has watched for a day and
    /// one started a second ago hold the same.
    fn put(&mut self, key: &[u8], value: &[u8], out: &mut Outcome) {
        let meta = match self.decode(key, value) {
            Ok(meta) => meta,
            Err((id, _)) => {
                out.invalid += 1;
                if let Some(id) = id.filter(|id| self.metas.remove(id).is_some()) {
                    out.changes.push(Change::Remove(id));
                }
                return;
            }
        };
        if self.metas.get(meta.id()) == Some(&meta) {
            return;
        }
        self.metas.insert(meta.id().clone(), meta.clone());
        out.changes.push(Change::Insert(meta.id().clone(), meta));
    }

    fn delete(&mut self, key: &[u8], out: &mut Outcome) {
        let Ok(id) = key_id(&self.prefix, key) else {
            return;
        };
        if self.metas.remove(&id).is_some() {
            out.changes.push(Change::Remove(id));
        }
    }

    /// Decodes a record, logging a failure (with the ID when the key named
    /// one).
    fn decode(
        &self,
        key: &[u8],
        value: &[u8],
    ) -> Result<BackendMeta, (Option<BackendId>, RecordError)> {
        let id = key_id(&self.prefix, key).map_err(|error| {
            let key = shown(key);
            tracing::warn!(%key, %error, "etcd: skipping a key that names no backend");
            (None, error)
        })?;
        let meta = decode_record(id.clone(), value);
        meta.and_then(|meta| self.allow.check(&meta).map(|()| meta))
            .map_err(|error| {
            let key = shown(key);
            tracing::warn!(%key, %error, "etcd: an invalid backend record; that backend is out of the fleet until it is valid");
            (Some(id), error)
        })
    }
}

/// A key as logged: escaped (no line break or escape sequence of its own
/// reaches the log) and cut at 128 characters.
pub(super) fn shown(key: &[u8]) -> String {
    let text = String::from_utf8_lossy(key);
    let mut shown: String = text
        .chars()
        .take(128)
        .flat_map(char::escape_debug)
        .collect();
    if text.chars().count() > 128 {
        shown.push('…');
    }
    shown
}

#[cfg(test)]
mod tests;
