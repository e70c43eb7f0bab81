//! The simulated backends: serving slots with a FIFO queue beyond them,
//! and GPU memory for a few models (LRU). A request for a model not
//! resident starts its load — one load at a time per backend (they share
//! the host-to-GPU bandwidth), a serving slot not held meanwhile — and
//! queues for a slot once the model is ready; a request for a model still
//! loading waits for that load.

use std::collections::VecDeque;

use crate::lru::Memory;
use crate::queue::Nanos;
use crate::workload::Model;

/// A failed backend answers every request with an error after this long.
pub const FAIL_NS: Nanos = 5_000_000;

/// One backend.
pub struct Server {
    free: u32,
    queue: VecDeque<u32>,
    pub memory: Memory,
    pub failed: bool,
    /// When the load in progress (if any) ends.
    loads_free_at: Nanos,
}

/// Where an inference request for a model stands on arrival.
#[derive(Debug, PartialEq, Eq)]
pub enum Arrival {
    /// Resident and loaded: it can be served.
    Warm,
    /// It waits until the model is ready; `loaded`: it started the load.
    Cold { ready: Nanos, loaded: bool },
}

impl Server {
    pub fn new(serving_slots: usize, model_slots: usize) -> Self {
        Self {
            free: serving_slots as u32,
            queue: VecDeque::new(),
            memory: Memory::new(model_slots),
            failed: false,
            loads_free_at: 0,
        }
    }

    /// An inference request for `model` arrives at `now`: warm, or waiting
    /// for a load (started now, behind any load in progress, if the model
    /// is not resident).
    pub fn arrive(&mut self, id: u32, model: &Model, now: Nanos) -> Arrival {
        match self.memory.touch(id, now) {
            Some(ready) if ready <= now => Arrival::Warm,
            Some(ready) => Arrival::Cold {
                ready,
                loaded: false,
            },
            None => {
                let ready = self.loads_free_at.max(now) + model.load;
                self.loads_free_at = ready;
                self.memory.load(id, now, ready);
                Arrival::Cold {
                    ready,
                    loaded: true,
                }
            }
        }
    }

    /// Takes a request ready to be served: true if it starts now (a
    /// serving slot is free), false if it queues.
    pub fn admit(&mut self, slot: u32) -> bool {
        if self.free > 0 {
            self.free -= 1;
            true
        } else {
            self.queue.push_back(slot);
            false
        }
    }

    /// A request in service ended: the next queued one, if any, takes its
    /// serving slot.
    pub fn release(&mut self) -> Option<u32> {
        match self.queue.pop_front() {
            Some(next) => Some(next),
            None => {
                self.free += 1;
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_run_one_at_a_time_and_later_requests_wait_for_them() {
        let model = Model {
            size_gb: 1,
            infer: 10,
            load: 100,
        };
        let mut server = Server::new(2, 4);
        let cold = |ready, loaded| Arrival::Cold { ready, loaded };
        assert_eq!(server.arrive(7, &model, 0), cold(100, true));
        assert_eq!(server.arrive(7, &model, 20), cold(100, false));
        assert_eq!(
            server.arrive(8, &model, 30),
            cold(200, true),
            "behind 7's load"
        );
        assert_eq!(server.arrive(7, &model, 150), Arrival::Warm);
        assert!(server.admit(0) && server.admit(1) && !server.admit(2));
        assert_eq!(
            server.release(),
            Some(2),
            "the queued request takes the slot"
        );
        assert_eq!(server.release(), None);
    }
}
