//! The models one simulated backend holds in GPU memory, least recently
//! used evicted first.

use crate::queue::Nanos;

#[derive(Debug, Clone, Copy)]
struct Slot {
    model: u32,
    last_use: Nanos,
    /// When its load finishes (in the past once loaded).
    ready_at: Nanos,
}

/// Up to `capacity` resident models (a few: a linear scan is the fastest).
#[derive(Debug, Clone)]
pub struct Memory {
    slots: Vec<Slot>,
    capacity: usize,
}

impl Memory {
    pub fn new(capacity: usize) -> Self {
        Self {
            slots: Vec::with_capacity(capacity),
            capacity: capacity.max(1),
        }
    }

    /// If `model` is resident (or loading), marks it used at `now` and
    /// returns when it is (or was) ready.
    pub fn touch(&mut self, model: u32, now: Nanos) -> Option<Nanos> {
        let slot = self.slots.iter_mut().find(|s| s.model == model)?;
        slot.last_use = now;
        Some(slot.ready_at)
    }

    /// Starts loading `model` at `now`, ready at `ready_at`, evicting the
    /// least recently used model if memory is full (a loaded one before
    /// one still loading). Returns the model evicted.
    pub fn load(&mut self, model: u32, now: Nanos, ready_at: Nanos) -> Option<u32> {
        let slot = Slot {
            model,
            last_use: now,
            ready_at,
        };
        if self.slots.len() < self.capacity {
            self.slots.push(slot);
            return None;
        }
        let victim = self
            .slots
            .iter()
            .enumerate()
            .min_by_key(|(_, s)| (s.ready_at > now, s.last_use))
            .map(|(i, _)| i)?;
        let evicted = self.slots[victim].model;
        self.slots[victim] = slot;
        Some(evicted)
    }

    /// The models resident and loaded at `now`.
    pub fn loaded(&self, now: Nanos) -> impl Iterator<Item = u32> + '_ {
        self.slots
            .iter()
            .filter(move |s| s.ready_at <= now)
            .map(|s| s.model)
    }

    /// Models held (loaded or loading).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_the_least_recently_used_loaded_model() {
        let mut memory = Memory::new(2);
        assert_eq!(memory.load(1, 0, 5), None);
        assert_eq!(memory.load(2, 1, 6), None);
        assert_eq!(memory.touch(1, 10), Some(5));
        assert_eq!(memory.load(3, 11, 20), Some(2), "2 was used longest ago");
        assert_eq!(memory.touch(2, 12), None);
        assert_eq!(memory.len(), 2);
    }

    #[test]
    fn a_model_still_loading_is_evicted_last() {
        let mut memory = Memory::new(2);
        memory.load(1, 0, 100); // loading until 100
        memory.load(2, 5, 6);
        // At 10, model 1 is older but still loading: 2 goes.
        assert_eq!(memory.load(3, 10, 20), Some(2));
        assert_eq!(memory.loaded(50).collect::<Vec<_>>(), vec![3]);
    }
}
