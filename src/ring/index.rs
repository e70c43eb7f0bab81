//! The bucket index over a ring's points, and the lookups through it.

use super::{Point, Ring, MAX_POINTS};

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

/// The bucket index over a ring's points: bucket `j` holds the position of
/// the first point whose hash is at least `j << shift`, for each of the
/// `2^(64 - shift)` buckets — and, when no point falls inside the bucket,
/// that point's member: every key of the bucket belongs to it, found with
/// one read.
#[derive(Debug, Clone)]
pub(super) struct Index {
    pub(super) shift: u32,
    pub(super) buckets: Box<[Bucket]>,
}

/// One bucket of the [`Index`].
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Bucket {
    /// Position of the first point at or after the bucket's start.
    pub(super) first: u32,
    /// 1 + the member owning every key of the bucket when no point falls
    /// inside it; 0 otherwise (or on an empty ring).
    pub(super) owner: u32,
}

impl Bucket {
    #[inline]
    pub(super) fn owner(self) -> Option<usize> {
        (self.owner as usize).checked_sub(1)
    }
}

impl Index {
    /// As many buckets as the next power of two of the number of points
    /// (so at most one point per bucket on average), between 2 and
    /// [`MAX_POINTS`].
    pub(super) fn build(points: &[Point]) -> Self {
        let bits = points
            .len()
            .next_power_of_two()
            .trailing_zeros()
            .clamp(1, MAX_POINTS.trailing_zeros());
        let shift = u64::BITS - bits;
        let count = 1usize << bits;
        let mut firsts = Vec::with_capacity(count + 1);
        let mut pos = 0;
        for bucket in 0..count as u64 {
            let floor = bucket << shift;
            while pos < points.len() && points[pos].hash < floor {
                pos += 1;
            }
            firsts.push(pos);
        }
        firsts.push(points.len());
        let buckets = firsts
            .windows(2)
            .map(|w| {
                let (first, next) = (w[0], w[1]);
                // Past the last point, the walk wraps to the first.
                let successor = points.get(first).or(points.first());
                let owner = match successor {
                    Some(point) if first == next => point.member + 1,
                    _ => 0,
                };
                Bucket {
                    first: first as u32,
                    owner,
                }
            })
            .collect();
        Self { shift, buckets }
    }

    /// The bucket of `key`.
    #[inline]
    pub(super) fn bucket(&self, key: u64) -> Bucket {
        let j = (key >> self.shift) as usize;
        self.buckets.get(j).copied().unwrap_or_default()
    }

    /// The position of the first point past `key`'s bucket: the next
    /// bucket's first, or `u32::MAX` for the last bucket (past every point).
    fn end(&self, key: u64) -> usize {
        let next = (key >> self.shift) as usize + 1;
        self.buckets.get(next).map_or(u32::MAX, |b| b.first) as usize
    }
}
