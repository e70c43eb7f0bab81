//! The bucket index over a ring's points.

use super::point::{Point, MAX_POINTS};

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
    pub(super) fn end(&self, key: u64) -> usize {
        let next = (key >> self.shift) as usize + 1;
        self.buckets.get(next).map_or(u32::MAX, |b| b.first) as usize
    }
}
