use std::collections::BTreeMap;

use proptest::prelude::*;
use tower::discover::Change;

use super::{Event, Members, MetaChange, Outcome};
use crate::backend::BackendId;
use crate::backend::BackendMeta;

const PREFIX: &[u8] = b"/fleet/";

fn key(n: u8) -> Vec<u8> {
    [PREFIX, format!("gpu-{n}").as_bytes()].concat()
}

fn value(weight: u32) -> Vec<u8> {
    format!(r#"{{"version":1,"address":"http://10.0.0.1:8000","weight":{weight}}}"#).into_bytes()
}

fn id(n: u8) -> BackendId {
    BackendId::new(&format!("gpu-{n}")).unwrap()
}

/// The fleet a consumer holds after applying `changes` to `fleet`.
fn play(fleet: &mut BTreeMap<BackendId, BackendMeta>, changes: &[MetaChange]) {
    for change in changes {
        match change {
            Change::Insert(id, meta) => {
                fleet.insert(id.clone(), meta.clone());
            }
            Change::Remove(id) => {
                assert!(
                    fleet.remove(id).is_some(),
                    "a Remove of {id}, never announced"
                );
            }
        }
    }
}

#[test]
fn puts_and_deletes_become_inserts_and_removes() {
    let mut members = Members::new(PREFIX.to_vec());
    let mut out = Outcome::default();
    let (k0, k1, v1, v2) = (key(0), key(1), value(1), value(2));
    members.apply(
        [(5, Event::Put(&k0, &v1)), (5, Event::Put(&k1, &v1))],
        &mut out,
    );
    assert_eq!(members.revision(), 5);
    assert_eq!(out.applied, 2, "two events of one revision (a transaction)");
    // The same record again is no change; a new weight is.
    members.apply(
        [(6, Event::Put(&k0, &v1)), (7, Event::Put(&k1, &v2))],
        &mut out,
    );
    members.apply([(8, Event::Delete(&k0))], &mut out);
    let kinds: Vec<_> = out
        .changes
        .iter()
        .map(|c| match c {
            Change::Insert(id, meta) => format!("+{id}:{}", meta.weight()),
            Change::Remove(id) => format!("-{id}"),
        })
        .collect();
    assert_eq!(kinds, ["+gpu-0:1", "+gpu-1:1", "+gpu-1:2", "-gpu-0"]);
    assert_eq!((out.applied, out.stale, out.invalid), (5, 0, 0));
}

#[test]
fn a_replayed_event_is_dropped_and_counted() {
    let mut members = Members::new(PREFIX.to_vec());
    let mut out = Outcome::default();
    let (k0, v1) = (key(0), value(1));
    members.apply([(9, Event::Put(&k0, &v1))], &mut out);
    members.apply([(9, Event::Delete(&k0)), (3, Event::Delete(&k0))], &mut out);
    assert_eq!(out.stale, 2);
    assert_eq!(out.changes.len(), 1, "the replayed deletes removed nothing");
    assert_eq!(members.len(), 1);
}

#[test]
fn an_invalid_value_is_no_backend_as_a_fresh_replica_sees_it() {
    let mut members = Members::new(PREFIX.to_vec());
    let mut out = Outcome::default();
    let (k0, k1, v1) = (key(0), key(1), value(1));
    members.apply(
        [(2, Event::Put(&k0, &v1)), (2, Event::Put(&k1, &v1))],
        &mut out,
    );
    members.apply([(3, Event::Put(&k0, b"{not json"))], &mut out);
    assert_eq!((out.invalid, out.changes.len(), members.len()), (1, 3, 1));
    assert!(matches!(&out.changes[2], Change::Remove(gone) if *gone == id(0)));
    // A replica that starts now reads the same store: the same fleet, and
    // a snapshot of it changes nothing. A bad key is skipped.
    let bad_key = [PREFIX, b"a b"].concat();
    let store = [
        (&k0[..], &b"{not json"[..]),
        (&k1[..], &v1[..]),
        (&bad_key[..], &v1[..]),
    ];
    let mut fresh = Members::new(PREFIX.to_vec());
    fresh.replace(3, store, &mut Outcome::default());
    assert_eq!(fresh.metas, members.metas);
    let mut out = Outcome::default();
    members.replace(4, store, &mut out);
    assert_eq!((out.invalid, out.changes.len(), members.len()), (2, 0, 1));
    // Valid again: back in.
    let mut out = Outcome::default();
    members.apply([(5, Event::Put(&k0, &v1))], &mut out);
    assert_eq!((out.changes.len(), members.len()), (1, 2));
}

#[test]
fn a_key_is_logged_escaped_and_cut() {
    assert_eq!(super::shown(b"/fleet/gpu\nFAKE"), r"/fleet/gpu\nFAKE");
    assert_eq!(super::shown(b"/a\x1b[31m"), r"/a\u{1b}[31m");
    let long = super::shown(&[b'k'; 2000]);
    assert_eq!(long.chars().count(), 129);
}

#[test]
fn a_snapshot_is_a_diff_not_a_flap() {
    let mut members = Members::new(PREFIX.to_vec());
    let mut out = Outcome::default();
    let (k0, k1, k2, v1, v3) = (key(0), key(1), key(2), value(1), value(3));
    members.apply(
        [(2, Event::Put(&k0, &v1)), (3, Event::Put(&k1, &v1))],
        &mut out,
    );
    let mut out = Outcome::default();
    members.replace(10, [(&k1[..], &v3[..]), (&k2[..], &v1[..])], &mut out);
    let expected = [
        Change::Remove(id(0)),
        Change::Insert(id(1), super::decode_record(id(1), &v3).unwrap()),
        Change::Insert(id(2), super::decode_record(id(2), &v1).unwrap()),
    ];
    assert_eq!(out.changes.len(), expected.len());
    for (got, want) in out.changes.iter().zip(&expected) {
        match (got, want) {
            (Change::Remove(a), Change::Remove(b)) => assert_eq!(a, b),
            (Change::Insert(a, m), Change::Insert(b, n)) => assert_eq!((a, m), (b, n)),
            _ => panic!("{got:?} is not {want:?}"),
        }
    }
    assert_eq!(members.revision(), 10);
}

/// One write to the store: a put of a weight, or a delete.
#[derive(Debug, Clone)]
enum Op {
    Put(u8, u32),
    Delete(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..6, 1u32..4).prop_map(|(n, w)| Op::Put(n, w)),
        (0u8..6).prop_map(Op::Delete),
    ]
}

proptest! {
    /// Whatever the history, and wherever a compaction cut it (a fresh
    /// snapshot in place of the events after `cut`), the consumer ends
    /// with exactly the store's records, every Remove is of a backend it
    /// had, and a snapshot of an unchanged store yields nothing.
    #[test]
    fn events_and_snapshots_agree_with_the_store(
        ops in proptest::collection::vec(op(), 0..60),
        cut in 0usize..60,
    ) {
        let mut store: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut members = Members::new(PREFIX.to_vec());
        let mut fleet = BTreeMap::new();
        let cut = cut.min(ops.len());
        for (i, op) in ops.iter().enumerate() {
            let revision = i as i64 + 1;
            let mut out = Outcome::default();
            match op {
                Op::Put(n, w) => {
                    store.insert(key(*n), value(*w));
                    if i < cut {
                        members.apply([(revision, Event::Put(&key(*n), &value(*w)))], &mut out);
                    }
                }
                Op::Delete(n) => {
                    store.remove(&key(*n));
                    if i < cut {
                        members.apply([(revision, Event::Delete(&key(*n)))], &mut out);
                    }
                }
            }
            play(&mut fleet, &out.changes);
        }
        // The events after the cut were compacted away: a snapshot.
        let mut out = Outcome::default();
        let kvs = store.iter().map(|(k, v)| (k.as_slice(), v.as_slice()));
        members.replace(ops.len() as i64, kvs, &mut out);
        play(&mut fleet, &out.changes);
        let expected: BTreeMap<_, _> = store
            .iter()
            .map(|(k, v)| {
                let id = super::key_id(PREFIX, k).unwrap();
                (id.clone(), super::decode_record(id, v).unwrap())
            })
            .collect();
        prop_assert_eq!(&fleet, &expected);
        let mut again = Outcome::default();
        let kvs = store.iter().map(|(k, v)| (k.as_slice(), v.as_slice()));
        members.replace(ops.len() as i64, kvs, &mut again);
        prop_assert!(again.changes.is_empty());
    }
}
