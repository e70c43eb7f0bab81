//! The simulated backends: serving slots with a FIFO queue beyond them,
//! and GPU memory for a few models (LRU). A request for a model not
//! resident loads it first, holding its serving slot; one for a model
//! still loading waits for the load.

use std::collections::VecDeque;

use crate::lru::Memory;
use crate::queue::Nanos;
use crate::workload::{Model, UPDATE_NS};

/// A failed backend answers every request with an error after this long.
pub const FAIL_NS: Nanos = 5_000_000;

/// One backend.
pub struct Server {
    free: u32,
    queue: VecDeque<u32>,
    pub memory: Memory,
    pub failed: bool,
    /// Requests sent and not yet answered (queued and in service).
    pub in_flight: u32,
}

/// How a request started on a backend is served.
pub struct Service {
    /// When it ends.
    pub end: Nanos,
    /// Whether it waited for its model to load.
    pub cold: bool,
    /// Whether it started a load.
    pub loaded: bool,
}

impl Server {
    pub fn new(serving_slots: usize, model_slots: usize) -> Self {
        Self {
            free: serving_slots as u32,
            queue: VecDeque::new(),
            memory: Memory::new(model_slots),
            failed: false,
            in_flight: 0,
        }
    }

    /// Takes a request: true if it starts now (a serving slot is free),
    /// false if it queues.
    pub fn admit(&mut self, slot: u32) -> bool {
        if self.free > 0 {
            self.free -= 1;
            true
        } else {
            self.queue.push_back(slot);
            false
        }
    }

    /// Serves a request that holds a serving slot from `now`: an update,
    /// or an inference for `model` (`None` for an update).
    pub fn serve(&mut self, model: Option<(u32, &Model)>, now: Nanos) -> Service {
        let Some((id, model)) = model else {
            return Service {
                end: now + UPDATE_NS,
                cold: false,
                loaded: false,
            };
        };
        match self.memory.touch(id, now) {
            Some(ready) => Service {
                end: ready.max(now) + model.infer,
                cold: ready > now,
                loaded: false,
            },
            None => {
                self.memory.load(id, now, now + model.load);
                Service {
                    end: now + model.load + model.infer,
                    cold: true,
                    loaded: true,
                }
            }
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
    fn a_cold_request_loads_and_the_next_waits_for_the_load() {
        let model = Model {
            size_gb: 1,
            infer: 10,
            load: 100,
        };
        let mut server = Server::new(2, 4);
        assert!(server.admit(0) && server.admit(1) && !server.admit(2));
        let first = server.serve(Some((7, &model)), 0);
        assert_eq!((first.end, first.cold, first.loaded), (110, true, true));
        let second = server.serve(Some((7, &model)), 20);
        assert_eq!((second.end, second.cold, second.loaded), (110, true, false));
        let warm = server.serve(Some((7, &model)), 200);
        assert_eq!((warm.end, warm.cold), (210, false));
        assert_eq!(server.release(), Some(2), "the queued request takes the slot");
        assert_eq!(server.release(), None);
    }
}
