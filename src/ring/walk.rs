//! Walking the ring from a key, one distinct member at a time.

use super::build::Ring;

impl Ring {
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

    /// The first `k` distinct members from `key` (fewer when fewer members
    /// hold points).
    #[inline]
    pub fn owners(&self, key: u64, k: usize) -> std::iter::Take<Walk<'_>> {
        self.walk(key).take(k)
    }
}

/// Iterator over a ring's members in ring order from a key, each once.
///
/// Created by [`Ring::walk`]. Yields member indices; the first `k` are the
/// key's owners, the rest the order to spill along. Members holding no
/// point are never yielded.
#[derive(Debug, Clone)]
pub struct Walk<'a> {
    ring: &'a Ring,
    pos: usize,
    steps_left: usize,
    found: usize,
    pub(super) seen: Seen,
    /// The first member, when the index gave it: yielded before reading
    /// any point.
    head: Option<usize>,
}

impl<'a> Walk<'a> {
    #[inline]
    pub(super) fn new(ring: &'a Ring, start: usize) -> Self {
        Self {
            ring,
            pos: start,
            steps_left: ring.points.len(),
            found: 0,
            seen: Seen::with_capacity(ring.members.len()),
            head: None,
        }
    }

    /// A walk whose first point, at `start`, is known to be `owner`'s:
    /// it yields `owner` without reading the point.
    #[inline]
    pub(super) fn from_owner(ring: &'a Ring, start: usize, owner: usize) -> Self {
        let mut walk = Self::new(ring, start);
        walk.head = Some(owner);
        walk
    }
}

impl Iterator for Walk<'_> {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        if let Some(owner) = self.head.take() {
            // The point at `pos` is the owner's: step past it.
            if self.pos >= self.ring.points.len() {
                self.pos = 0;
            }
            self.pos += 1;
            self.steps_left -= 1;
            self.seen.insert(owner, self.ring.members.len());
            self.found += 1;
            return Some(owner);
        }
        while self.steps_left > 0 && self.found < self.ring.placed {
            if self.pos >= self.ring.points.len() {
                self.pos = 0;
            }
            let member = self.ring.point_member(self.pos);
            self.pos += 1;
            self.steps_left -= 1;
            if self.seen.insert(member, self.ring.members.len()) {
                self.found += 1;
                return Some(member);
            }
        }
        None
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.ring.placed - self.found))
    }
}

/// Members a walk has met. Rings of up to 256 members keep an inline bit set;
/// larger rings list the first [`FEW`] members inline (a walk for a few
/// owners stops long before), and move to a bit set on the heap past that.
#[derive(Debug, Clone)]
pub(super) enum Seen {
    /// A bit per member, for rings of up to 256 members.
    Inline([u64; 4]),
    /// The first `len` entries are the members met so far.
    Few { members: [u32; FEW], len: usize },
    /// A bit per member, once a walk on a large ring has met more than
    /// [`FEW`] members.
    Heap(Vec<u64>),
}

/// How many members a walk on a ring of more than 256 lists inline.
pub(super) const FEW: usize = 16;

impl Seen {
    #[inline]
    fn with_capacity(members: usize) -> Self {
        if members <= 256 {
            Seen::Inline([0; 4])
        } else {
            Seen::Few {
                members: [0; FEW],
                len: 0,
            }
        }
    }

    /// Marks `index` (below `capacity`, the ring's member count); false when
    /// it was already marked.
    #[inline]
    fn insert(&mut self, index: usize, capacity: usize) -> bool {
        let words: &mut [u64] = match self {
            Seen::Inline(words) => words,
            Seen::Heap(words) => words,
            Seen::Few { members, len } => {
                if members[..*len].contains(&(index as u32)) {
                    return false;
                }
                match members.get_mut(*len) {
                    Some(slot) => {
                        *slot = index as u32;
                        *len += 1;
                    }
                    None => *self = Seen::spill(members, index, capacity),
                }
                return true;
            }
        };
        set(words, index)
    }

    /// The bit set that takes over from a full [`Seen::Few`], with `members`
    /// and `index` marked.
    #[cold]
    fn spill(members: &[u32; FEW], index: usize, capacity: usize) -> Self {
        let mut words = vec![0; capacity.div_ceil(64)];
        for &member in members {
            set(&mut words, member as usize);
        }
        set(&mut words, index);
        Seen::Heap(words)
    }
}

/// Sets bit `index`; false when it was already set.
#[inline]
fn set(words: &mut [u64], index: usize) -> bool {
    let (word, bit) = (index / 64, 1u64 << (index % 64));
    let fresh = words[word] & bit == 0;
    words[word] |= bit;
    fresh
}

#[cfg(test)]
mod tests {
    use crate::backend::BackendId;
    use crate::ring::{Ring, RingConfig};

    /// A walk reads points only until it has met every member holding one:
    /// the rest of the ring is never read, however often `next` is called.
    /// (Its results alone cannot show this: reading on finds no one new.)
    #[test]
    fn a_walk_stops_reading_at_its_last_member() {
        let members = (0..6).map(|i| (BackendId::new(&format!("m-{i}")).unwrap(), 1));
        let ring = Ring::build(&RingConfig::new(4, 20).unwrap(), members).unwrap();
        let points = ring.points.len();
        for key in (0..256u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15)) {
            let start = ring.points.partition_point(|p| p.hash < key);
            let mut seen = [false; 6];
            let mut read = 0;
            for step in 0..points {
                let member = ring.points[(start + step) % points].member as usize;
                if !std::mem::replace(&mut seen[member], true) {
                    read = step + 1;
                }
            }
            let mut walk = ring.walk(key);
            assert_eq!(walk.by_ref().count(), 6);
            assert_eq!(walk.next(), None);
            assert_eq!(walk.found, 6);
            assert_eq!(walk.steps_left, points - read, "key {key:#x}");
        }
    }
}
