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

mod index;
mod walk;

pub use self::walk::Walk;

use self::index::Index;
use crate::backend::id::BackendId;
use crate::error::common::InvalidConfig;

/// Default virtual nodes per unit of weight (the original design's 150).
pub(crate) const DEFAULT_VNODES_PER_WEIGHT: u32 = 150;
/// Largest number of points one ring may hold (16 Mi).
pub const MAX_POINTS: usize = 1 << 24;

/// Ring parameters. Gateways that share members, weights and this config
/// agree on every model's owners.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RingConfig {
    /// Seed of the xxh3 hash of point positions. Default 0.
    pub(crate) seed: u64,
    /// Virtual nodes per unit of backend weight, at least 1. Default 150.
    pub(crate) vnodes_per_weight: u32,
}

impl Default for RingConfig {
    fn default() -> Self {
        Self {
            seed: 0,
            vnodes_per_weight: DEFAULT_VNODES_PER_WEIGHT,
        }
    }
}

impl RingConfig {
    /// Seed of the xxh3 hash of point positions.
    pub(crate) fn seed(&self) -> u64 {
        self.seed
    }

    /// Virtual nodes per unit of backend weight.
    pub(crate) fn vnodes_per_weight(&self) -> u32 {
        self.vnodes_per_weight
    }

    /// The most virtual nodes per unit of weight: 10 000 (1 000 backends of
    /// weight 1 then fill 10 M of the ring's 16 Mi points).
    pub const MAX_VNODES_PER_WEIGHT: u32 = 10_000;

    /// A config with the given seed and vnode count.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming `vnodes_per_weight` when it is outside
    /// 1 ..= [`RingConfig::MAX_VNODES_PER_WEIGHT`] (more would leave room
    /// for few backends within [`MAX_POINTS`]: the rest would be left out).
    pub fn new(seed: u64, vnodes_per_weight: u32) -> Result<Self, InvalidConfig> {
        if !(1..=Self::MAX_VNODES_PER_WEIGHT).contains(&vnodes_per_weight) {
            return Err(InvalidConfig::new("vnodes_per_weight", "1 ..= 10000"));
        }
        Ok(Self {
            seed,
            vnodes_per_weight,
        })
    }
}

#[derive(Debug, Clone, Copy)]
struct Point {
    hash: u64,
    member: u32,
}

/// An immutable consistent-hash ring over a set of backends.
///
/// Member indices (`0..len()`) follow the order the members were given in;
/// which backends own a key does not.
#[derive(Debug, Clone)]
pub struct Ring {
    points: Box<[Point]>,
    members: Box<[BackendId]>,
    /// Members holding at least one point: the most a walk can yield.
    placed: usize,
    index: Index,
}

impl Ring {
    /// Builds a ring from `(id, weight)` pairs; weight is the relative share
    /// of keys, at least 1. Each member holds `weight × vnodes_per_weight`
    /// points.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming `weight` when a weight is 0, `backend_id`
    /// when an ID appears twice, `vnodes_per_weight` when the ring would hold
    /// more than [`MAX_POINTS`] points.
    pub fn build<I>(config: &RingConfig, members: I) -> Result<Self, InvalidConfig>
    where
        I: IntoIterator<Item = (BackendId, u32)>,
    {
        let mut members: Vec<(BackendId, u32)> = members.into_iter().collect();
        check_unique(&members)?;
        let vnodes = config.vnodes_per_weight.max(1);
        let mut total: usize = 0;
        for (_, weight) in &members {
            if *weight == 0 {
                return Err(InvalidConfig::new("weight", "at least 1"));
            }
            total = total.saturating_add((*weight as usize).saturating_mul(vnodes as usize));
        }
        if !within_max_points(total) {
            return Err(InvalidConfig::new(
                "vnodes_per_weight",
                "such that the ring holds at most 16 Mi points",
            ));
        }
        // Each count is at most the total, so within `u32`.
        for (_, weight) in &mut members {
            *weight *= vnodes;
        }
        Ok(Self::from_counts(config, members, total))
    }

    /// Builds a ring from `(id, points)` pairs: member `id` holds its first
    /// `points` vnodes (indices `0..points`), whatever its weight. A member
    /// with its full `weight × vnodes_per_weight` points sits exactly where
    /// [`Ring::build`] puts it; one with fewer owns a subset of the keys it
    /// would own at full weight (and keys move to it from the others, never
    /// between the others); one with none is in the ring, by index, but owns
    /// no key and no walk yields it.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming `backend_id` when an ID appears twice,
    /// `points` when the ring would hold more than [`MAX_POINTS`] points.
    pub(crate) fn build_with_points<I>(
        config: &RingConfig,
        members: I,
    ) -> Result<Self, InvalidConfig>
    where
        I: IntoIterator<Item = (BackendId, u32)>,
    {
        let members: Vec<(BackendId, u32)> = members.into_iter().collect();
        check_unique(&members)?;
        let total = members
            .iter()
            .map(|(_, count)| *count as usize)
            .fold(0, usize::saturating_add);
        if !within_max_points(total) {
            return Err(InvalidConfig::new("points", "at most 16 Mi over the ring"));
        }
        Ok(Self::from_counts(config, members, total))
    }

    /// A ring of checked `(id, points)` pairs holding `total` points.
    fn from_counts(config: &RingConfig, members: Vec<(BackendId, u32)>, total: usize) -> Self {
        let mut points = Vec::with_capacity(total);
        let mut buf = Vec::new();
        for (index, (id, count)) in members.iter().enumerate() {
            for vnode in 0..*count {
                points.push(Point {
                    hash: point_hash(&mut buf, id, vnode, config.seed),
                    member: index as u32,
                });
            }
        }
        sort_points(&members, &mut points);
        let members = members.into_iter().map(|(id, _)| id).collect();
        Self::from_sorted(points.into_boxed_slice(), members)
    }

    /// A ring over points already in ring order.
    fn from_sorted(points: Box<[Point]>, members: Box<[BackendId]>) -> Self {
        let index = Index::build(&points);
        let mut placed = vec![false; members.len()];
        for point in points.iter() {
            placed[point.member as usize] = true;
        }
        Self {
            points,
            placed: placed.into_iter().filter(|&p| p).count(),
            members,
            index,
        }
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the ring has no members.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Number of points (virtual nodes) on the ring.
    #[cfg(test)]
    pub(crate) fn points(&self) -> usize {
        self.points.len()
    }

    /// The ID of member `index`.
    ///
    /// # Panics
    ///
    /// When `index >= len()`; indices yielded by [`Ring::walk`] are always
    /// in range.
    pub fn member(&self, index: usize) -> &BackendId {
        &self.members[index]
    }

    /// All members, by index.
    #[cfg(test)]
    pub(crate) fn members(&self) -> &[BackendId] {
        &self.members
    }

    /// Every member holding a point once, in ring order from `key`: the
    /// first is the key's primary owner. Allocates nothing for rings of up to 256 members, nor
    /// on larger rings for the first 16 members it yields.
    #[inline]
    pub fn walk(&self, key: u64) -> Walk<'_> {
        let bucket = self.index.bucket(key);
        match bucket.owner() {
            // An empty bucket: the key's first point is the bucket's.
            Some(owner) => Walk::from_owner(self, bucket.first as usize, owner),
            None => Walk::new(self, self.start_in(bucket, key)),
        }
    }

    /// The key's primary owner, the first member of [`Ring::walk`], found
    /// without setting up a walk; `None` when the ring is empty.
    #[inline]
    pub fn primary(&self, key: u64) -> Option<usize> {
        let bucket = self.index.bucket(key);
        if let Some(owner) = bucket.owner() {
            return Some(owner);
        }
        let point = self.points.get(self.start_in(bucket, key));
        point.or(self.points.first()).map(|p| p.member as usize)
    }

    /// The first `k` distinct members from `key` (fewer when fewer members
    /// hold points).
    #[inline]
    pub fn owners(&self, key: u64, k: usize) -> std::iter::Take<Walk<'_>> {
        self.walk(key).take(k)
    }

    #[inline]
    fn point_member(&self, pos: usize) -> usize {
        self.points[pos].member as usize
    }
}

/// Whether a ring of `total` points is allowed: at most [`MAX_POINTS`].
/// (Its own function so that the bound itself is tested, without building
/// a ring of 16 Mi points.)
fn within_max_points(total: usize) -> bool {
    total <= MAX_POINTS
}

/// [`InvalidConfig`] naming `backend_id` when an ID appears twice.
fn check_unique(members: &[(BackendId, u32)]) -> Result<(), InvalidConfig> {
    let mut sorted: Vec<&BackendId> = members.iter().map(|(id, _)| id).collect();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return Err(InvalidConfig::new("backend_id", "unique within a ring"));
    }
    Ok(())
}

/// Orders points by position, then backend ID bytes: colliding points are
/// kept side by side, in an order independent of member order. (Two points of
/// one backend on one position are interchangeable.)
fn sort_points(members: &[(BackendId, u32)], points: &mut [Point]) {
    points.sort_unstable_by(|a, b| {
        a.hash.cmp(&b.hash).then_with(|| {
            members[a.member as usize]
                .0
                .cmp(&members[b.member as usize].0)
        })
    });
}

fn point_hash(buf: &mut Vec<u8>, id: &BackendId, vnode: u32, seed: u64) -> u64 {
    buf.clear();
    buf.extend_from_slice(id.as_bytes());
    buf.push(0xff);
    buf.extend_from_slice(&vnode.to_le_bytes());
    xxhash_rust::xxh3::xxh3_64_with_seed(buf, seed)
}

#[cfg(test)]
mod tests;
