//! Room for a pick's owner lists, kept by each balancer clone and reused.

/// Owners whose lists fit in a [`Scratch`] without a heap buffer.
pub(crate) const INLINE_OWNERS: usize = 16;
/// Room for a pick's three owner lists, kept by each balancer clone and
/// reused, never cleared: a pick overwrites the part it reads, so no pick
/// zeroes it. Lists of up to [`INLINE_OWNERS`] owners each fit inline (a
/// clone whose models all have few owners — the default `owners` is 2 —
/// never allocates for them); longer ones go to a heap buffer that grows
/// to three times the most owners listed and is not shrunk, so a clone
/// allocates for it once per new high.
#[derive(Debug)]
pub(crate) struct Scratch {
    inline: [usize; 3 * INLINE_OWNERS],
    pub(crate) heap: Vec<usize>,
}

impl Default for Scratch {
    fn default() -> Self {
        Self {
            inline: [0; 3 * INLINE_OWNERS],
            heap: Vec::new(),
        }
    }
}

impl Scratch {
    /// `len` slots, holding whatever the last pick left there.
    #[inline]
    pub(crate) fn room(&mut self, len: usize) -> &mut [usize] {
        if len <= self.inline.len() {
            return &mut self.inline[..len];
        }
        if self.heap.len() < len {
            self.heap.resize(len, 0);
        }
        &mut self.heap[..len]
    }
}
