//! [`Ring`] and [`RingConfig`]: the ring's points and members, how it is
//! built, and the lookup of a key's first point through the bucket index.

use super::index::{Bucket, Index};
use super::point::{Point, MAX_POINTS};
use crate::backend::id::BackendId;
use crate::error::common::InvalidConfig;

/// Default virtual nodes per unit of weight (the original design's 150).
pub(crate) const DEFAULT_VNODES_PER_WEIGHT: u32 = 150;
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
    #[cfg_attr(not(feature = "config"), allow(dead_code))]
    pub(crate) fn seed(&self) -> u64 {
        self.seed
    }

    /// Virtual nodes per unit of backend weight.
    #[cfg_attr(not(feature = "config"), allow(dead_code))]
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

/// An immutable consistent-hash ring over a set of backends.
///
/// Member indices (`0..` the member count) follow the order the members were given in;
/// which backends own a key does not.
#[derive(Debug, Clone)]
pub struct Ring {
    pub(super) points: Box<[Point]>,
    pub(super) members: Box<[BackendId]>,
    /// Members holding at least one point: the most a walk can yield.
    pub(super) placed: usize,
    pub(super) index: Index,
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
    #[cfg_attr(not(feature = "balance"), allow(dead_code))]
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
    pub(super) fn from_sorted(points: Box<[Point]>, members: Box<[BackendId]>) -> Self {
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
    #[cfg(any(test, feature = "balance"))]
    pub(crate) fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the ring has no members.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
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
    /// When `index` is not below the member count; indices yielded by [`Ring::walk`] are always
    /// in range.
    pub fn member(&self, index: usize) -> &BackendId {
        &self.members[index]
    }

    /// All members, by index.
    #[cfg(test)]
    pub(crate) fn members(&self) -> &[BackendId] {
        &self.members
    }

    /// The key's primary owner, the first member of [`Ring::walk`], found
    /// without setting up a walk; `None` when the ring is empty.
    ///
    /// A hook of the crate's own tests, benches and simulator (feature `testing`): not
    /// part of the public API.
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    #[inline]
    pub fn primary(&self, key: u64) -> Option<usize> {
        let bucket = self.index.bucket(key);
        if let Some(owner) = bucket.owner() {
            return Some(owner);
        }
        let point = self.points.get(self.start_in(bucket, key));
        point.or(self.points.first()).map(|p| p.member as usize)
    }

    #[inline]
    pub(super) fn point_member(&self, pos: usize) -> usize {
        self.points[pos].member as usize
    }
}

/// Whether a ring of `total` points is allowed: at most [`MAX_POINTS`].
/// (Its own function so that the bound itself is tested, without building
/// a ring of 16 Mi points.)
pub(super) fn within_max_points(total: usize) -> bool {
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
pub(super) fn sort_points(members: &[(BackendId, u32)], points: &mut [Point]) {
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

impl Ring {
    /// Position of the first point at or after `key`; `points()` when there
    /// is none (the walk wraps). The same as
    /// `points.partition_point(|p| p.hash < key)`, in O(1) expected time.
    #[cfg(test)]
    pub(super) fn start(&self, key: u64) -> usize {
        self.start_in(self.index.bucket(key), key)
    }

    /// [`Ring::start`] from the key's bucket.
    #[inline]
    pub(super) fn start_in(&self, bucket: Bucket, key: u64) -> usize {
        // Every point before `lo` is below the key's bucket, so below the key.
        let lo = bucket.first as usize;
        match self.points.get(lo..lo + WINDOW) {
            // The answer is in the window: count without branching.
            Some(window) if window[WINDOW - 1].hash >= key => {
                lo + window
                    .iter()
                    .map(|p| usize::from(p.hash < key))
                    .sum::<usize>()
            }
            _ => self.start_beyond(lo, key),
        }
    }

    /// [`Ring::start`] when the key's first point is not among the
    /// [`WINDOW`] from `lo`: a crowded bucket, or the end of the ring. A
    /// binary search over the bucket's points only: the key's first point
    /// is at most the next bucket's first.
    #[cold]
    fn start_beyond(&self, lo: usize, key: u64) -> usize {
        let hi = self.index.end(key).min(self.points.len());
        let bucket = self.points.get(lo..hi).unwrap_or_default();
        lo + bucket.partition_point(|p| p.hash < key)
    }
}

/// Points compared at once from the start of a key's bucket: with about one
/// point per bucket, the key's first point is almost always among them.
const WINDOW: usize = 4;
