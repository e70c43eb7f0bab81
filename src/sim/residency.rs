//! Which models a simulated backend holds: LRU over a fixed number of
//! resident slots, with loads in progress (pure logic, takes `now`).

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// What a request finds when it asks for its model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Access {
    /// Resident and loaded: serve now.
    Warm,
    /// This request starts a load that ends at the given instant.
    Load {
        /// When the weights are in memory.
        ready_at: Instant,
    },
    /// Another request's load is in progress; it ends at the given instant.
    Loading {
        /// When the weights are in memory.
        ready_at: Instant,
    },
}

#[derive(Debug, Clone)]
struct Entry {
    model: String,
    last_used: Instant,
    ready_at: Instant,
}

/// Resident models of one backend, least recently used evicted first; it
/// also remembers the last [`EVICTED_KEPT`](Self::EVICTED_KEPT) models it
/// evicted.
#[derive(Debug, Clone)]
pub struct Residency {
    slots: usize,
    entries: Vec<Entry>,
    /// Evicted models not resident again, most recent first.
    evicted: VecDeque<String>,
}

impl Residency {
    /// How many evicted models are remembered (the oldest are forgotten).
    pub const EVICTED_KEPT: usize = 32;

    /// Room for `slots` models (at least 1).
    pub fn new(slots: usize) -> Self {
        Self {
            slots: slots.max(1),
            entries: Vec::with_capacity(slots.max(1)),
            evicted: VecDeque::new(),
        }
    }

    /// Requests `model` at `now`; a miss evicts the least recently used
    /// model and starts a load taking `load_time`.
    pub fn access(&mut self, model: &str, now: Instant, load_time: Duration) -> Access {
        if let Some(entry) = self.entries.iter_mut().find(|e| e.model == model) {
            entry.last_used = now;
            return if entry.ready_at > now {
                Access::Loading {
                    ready_at: entry.ready_at,
                }
            } else {
                Access::Warm
            };
        }
        if self.entries.len() >= self.slots {
            if let Some(lru) = (0..self.entries.len()).min_by_key(|&i| self.entries[i].last_used) {
                let gone = self.entries.swap_remove(lru);
                self.evicted.push_front(gone.model);
                self.evicted.truncate(Self::EVICTED_KEPT);
            }
        }
        self.evicted.retain(|m| m != model);
        let ready_at = now + load_time;
        self.entries.push(Entry {
            model: model.to_owned(),
            last_used: now,
            ready_at,
        });
        Access::Load { ready_at }
    }

    /// The resident models (loaded or loading), in no particular order.
    pub fn models(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| e.model.as_str())
    }

    /// The resident models with whether each is loaded at `now` (`false`:
    /// its load is still in progress), in no particular order.
    pub fn states(&self, now: Instant) -> impl Iterator<Item = (&str, bool)> {
        self.entries
            .iter()
            .map(move |e| (e.model.as_str(), e.ready_at <= now))
    }

    /// The models evicted and not resident since, most recent first, at
    /// most [`EVICTED_KEPT`](Self::EVICTED_KEPT).
    pub fn evicted(&self) -> impl Iterator<Item = &str> {
        self.evicted.iter().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_eviction_and_loading() {
        let t0 = Instant::now();
        let load = Duration::from_millis(300);
        let mut r = Residency::new(2);
        assert_eq!(
            r.access("a", t0, load),
            Access::Load {
                ready_at: t0 + load
            }
        );
        let t1 = t0 + Duration::from_millis(100);
        assert_eq!(
            r.access("a", t1, load),
            Access::Loading {
                ready_at: t0 + load
            }
        );
        let t2 = t0 + Duration::from_millis(400);
        assert_eq!(
            r.access("b", t2, load),
            Access::Load {
                ready_at: t2 + load
            }
        );
        let t3 = t2 + Duration::from_secs(1);
        assert_eq!(r.access("a", t3, load), Access::Warm);
        // "b" is least recently used now: "c" evicts it.
        assert!(matches!(r.access("c", t3, load), Access::Load { .. }));
        let mut models: Vec<&str> = r.models().collect();
        models.sort_unstable();
        assert_eq!(models, ["a", "c"]);
        assert_eq!(r.evicted().collect::<Vec<_>>(), ["b"]);
        let mut states: Vec<_> = r.states(t3).collect();
        states.sort_unstable();
        assert_eq!(states, [("a", true), ("c", false)]);
        assert!(matches!(r.access("b", t3, load), Access::Load { .. }));
        // "b" is back, "a" went (it was used before "c").
        assert_eq!(r.evicted().collect::<Vec<_>>(), ["a"]);
    }

    #[test]
    fn evicted_models_are_bounded() {
        let t0 = Instant::now();
        let mut r = Residency::new(1);
        for i in 0..100 {
            let now = t0 + Duration::from_millis(i);
            r.access(&format!("m{i}"), now, Duration::ZERO);
        }
        let evicted: Vec<&str> = r.evicted().collect();
        assert_eq!(evicted.len(), Residency::EVICTED_KEPT);
        assert_eq!(evicted[0], "m98");
    }
}
