//! Consistent-hash ring with virtual nodes and weights (pure logic).
//!
//! ```
//! use tower_model_balance::backend::BackendId;
//! use tower_model_balance::ring::{Ring, RingConfig};
//! use tower_model_balance::route::ModelId;
//!
//! let members = (0..4).map(|i| (BackendId::new(&format!("node-{i}")).unwrap(), 1));
//! let ring = Ring::build(&RingConfig::default(), members).unwrap();
//! let model = ModelId::new("llama-3-8b").unwrap();
//! let owners: Vec<_> = ring.owners(model.hash64(), 2).map(|i| ring.member(i).as_str()).collect();
//! assert_eq!(owners.len(), 2);
//! assert_ne!(owners[0], owners[1]);
//! ```
//!
//! Each backend gets `vnodes_per_weight × weight` points on a 64-bit ring;
//! a point's position is the xxh3 hash, under the ring's seed, of the
//! backend ID's bytes, a `0xff` separator (never part of UTF-8) and the point
//! index as 4 little-endian bytes. A key (a model ID's carried xxh3 hash)
//! belongs to the first point at or after it, wrapping around; its owners are
//! the first `k` distinct backends met walking on from there (Karger et al.,
//! 1997, with virtual nodes as in Dynamo).
//!
//! The balancer stages ring changes (joins and weight changes land a share
//! of points at a time) by giving members fewer points than their
//! weight's: a member with `count` points holds the first `count` of its
//! vnode indices, so its points are a subset of those it holds at full
//! weight, and a ring whose members all hold their full count is exactly the
//! ring [`Ring::build`] makes. A member may then hold no point at all: it is
//! in the ring (it has an index) but owns no key and no walk yields it.
//!
//! Two points on the same position are both kept, ordered by backend ID bytes
//! and then point index, so no point is ever lost and the mapping does not
//! depend on the order members were given in. The mapping from a model to
//! its owners is a stable contract: golden vectors in the tests pin it.
//!
//! Finding a key's first point takes O(1) expected time: the build also keeps
//! a bucket index: `2^b` buckets of 8 bytes for at most `2^b` points (at
//! most one point per bucket on average), bucket `j` holding the position
//! of the first point at or after `j << (64 - b)` and, when no point falls
//! inside the bucket (about half of them), that point's member — the key's
//! primary owner, read with no further lookup. Otherwise a lookup compares
//! the key with the next 4 points from the bucket's, without branching;
//! only when the key lies beyond them (a crowded bucket, the end of the
//! ring) does it binary search the rest of the bucket. It finds exactly the point a binary
//! search over the whole ring would.

mod build;
mod index;
mod point;
mod walk;

pub use self::build::{Ring, RingConfig};
pub use self::point::MAX_POINTS;
pub use self::walk::Walk;

#[cfg(test)]
mod tests;
