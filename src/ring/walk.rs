//! Walking the ring from a key, one distinct member at a time.

use super::Ring;

/// Iterator over a ring's members in ring order from a key, each once.
///
/// Created by [`Ring::walk`]. Yields member indices; the first `k` are the
/// key's owners, the rest the order to spill along.
#[derive(Debug, Clone)]
pub struct Walk<'a> {
    ring: &'a Ring,
    pos: usize,
    steps_left: usize,
    found: usize,
    seen: Seen,
}

impl<'a> Walk<'a> {
    pub(super) fn new(ring: &'a Ring, start: usize) -> Self {
        Self {
            ring,
            pos: start,
            steps_left: ring.points.len(),
            found: 0,
            seen: Seen::with_capacity(ring.members.len()),
        }
    }
}

impl Iterator for Walk<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        while self.steps_left > 0 && self.found < self.ring.members.len() {
            if self.pos >= self.ring.points.len() {
                self.pos = 0;
            }
            let member = self.ring.point_member(self.pos);
            self.pos += 1;
            self.steps_left -= 1;
            if self.seen.insert(member) {
                self.found += 1;
                return Some(member);
            }
        }
        None
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.ring.members.len() - self.found))
    }
}

/// A bit set of member indices: inline up to 256 members, on the heap above.
#[derive(Debug, Clone)]
enum Seen {
    Inline([u64; 4]),
    Heap(Vec<u64>),
}

impl Seen {
    fn with_capacity(members: usize) -> Self {
        if members <= 256 {
            Seen::Inline([0; 4])
        } else {
            Seen::Heap(vec![0; members.div_ceil(64)])
        }
    }

    /// Marks `index`; false when it was already marked.
    fn insert(&mut self, index: usize) -> bool {
        let words: &mut [u64] = match self {
            Seen::Inline(words) => words,
            Seen::Heap(words) => words,
        };
        let (word, bit) = (index / 64, 1u64 << (index % 64));
        let fresh = words[word] & bit == 0;
        words[word] |= bit;
        fresh
    }
}
