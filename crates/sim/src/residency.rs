//! Which models a simulated backend holds: LRU over a fixed number of
//! resident slots, with loads in progress (pure logic, takes `now`).

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

/// What a request finds when it asks for its model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum Access {
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
    /// When the weights are (or will be) in memory; `None` for a load
    /// started through the repository API that has not ended yet.
    ready_at: Option<Instant>,
}

impl Entry {
    fn loaded(&self, now: Instant) -> bool {
        self.ready_at.is_some_and(|at| at <= now)
    }
}

/// Resident models of one backend, least recently used evicted first; it
/// also remembers the last [`EVICTED_KEPT`](Self::EVICTED_KEPT) models it
/// evicted.
#[derive(Debug, Clone)]
pub(crate) struct Residency {
    slots: usize,
    entries: Vec<Entry>,
    /// Evicted models not resident again, most recent first.
    evicted: VecDeque<String>,
    /// Models evicted by the LRU to make room, ever.
    evictions: u64,
}

impl Residency {
    /// How many evicted models are remembered (the oldest are forgotten).
    pub(crate) const EVICTED_KEPT: usize = 32;

    /// Room for `slots` models (at least 1).
    pub(crate) fn new(slots: usize) -> Self {
        Self {
            slots: slots.max(1),
            entries: Vec::with_capacity(slots.max(1)),
            evicted: VecDeque::new(),
            evictions: 0,
        }
    }

    /// Requests `model` at `now`; a miss evicts the least recently used
    /// model and starts a load taking `load_time`.
    pub(crate) fn access(&mut self, model: &str, now: Instant, load_time: Duration) -> Access {
        if let Some(entry) = self.entries.iter_mut().find(|e| e.model == model) {
            entry.last_used = now;
            return match entry.ready_at {
                Some(at) if at <= now => Access::Warm,
                Some(at) => Access::Loading { ready_at: at },
                // A load through the repository API (explicit mode only,
                // where requests do not come here): a full load time.
                None => Access::Loading {
                    ready_at: now + load_time,
                },
            };
        }
        let ready_at = now + load_time;
        self.insert(model, now, Some(ready_at));
        Access::Load { ready_at }
    }

    /// Makes room (evicting the least recently used model if every slot
    /// is taken) and adds `model`, ready at `ready_at`. A model loading
    /// through the repository API is evicted only when every slot is such
    /// a load (a multi-model server does not drop weights it is still
    /// reading in).
    fn insert(&mut self, model: &str, now: Instant, ready_at: Option<Instant>) {
        if self.entries.len() >= self.slots {
            let lru = (0..self.entries.len())
                .filter(|&i| self.entries[i].ready_at.is_some())
                .min_by_key(|&i| self.entries[i].last_used)
                .or_else(|| (0..self.entries.len()).min_by_key(|&i| self.entries[i].last_used));
            if let Some(lru) = lru {
                let gone = self.entries.swap_remove(lru);
                self.evicted.push_front(gone.model);
                self.evicted.truncate(Self::EVICTED_KEPT);
                self.evictions += 1;
            }
        }
        self.evicted.retain(|m| m != model);
        self.entries.push(Entry {
            model: model.to_owned(),
            last_used: now,
            ready_at,
        });
    }

    /// Whether `model` is resident at `now`: `None` if not, `Some(true)`
    /// once loaded, `Some(false)` while loading. With `touch`, a resident
    /// model counts as used at `now`.
    pub(crate) fn lookup(&mut self, model: &str, now: Instant, touch: bool) -> Option<bool> {
        let entry = self.entries.iter_mut().find(|e| e.model == model)?;
        if touch {
            entry.last_used = now;
        }
        Some(entry.loaded(now))
    }

    /// Starts a load of `model` (not resident) at `now` that ends when
    /// [`finish_load`](Self::finish_load) says so, evicting the least
    /// recently used model if every slot is taken.
    pub(crate) fn start_load(&mut self, model: &str, now: Instant) {
        self.insert(model, now, None);
    }

    /// Ends the load of `model` at `now`; `false` when the model is no
    /// longer resident (evicted or unloaded while it loaded).
    pub(crate) fn finish_load(&mut self, model: &str, now: Instant) -> bool {
        match self.entries.iter_mut().find(|e| e.model == model) {
            Some(entry) => {
                entry.ready_at.get_or_insert(now);
                true
            }
            None => false,
        }
    }

    /// Removes `model` (loaded or loading), remembering it as evicted;
    /// `false` when it was not resident.
    pub(crate) fn remove(&mut self, model: &str) -> bool {
        let Some(i) = self.entries.iter().position(|e| e.model == model) else {
            return false;
        };
        let gone = self.entries.swap_remove(i);
        self.evicted.push_front(gone.model);
        self.evicted.truncate(Self::EVICTED_KEPT);
        true
    }

    /// Removes `model` after a failed load, without remembering it.
    pub(crate) fn abort_load(&mut self, model: &str) {
        self.entries.retain(|e| e.model != model);
    }

    /// Models evicted by the LRU to make room for another, ever (not
    /// those unloaded on request).
    pub(crate) fn evictions(&self) -> u64 {
        self.evictions
    }

    /// The resident models (loaded or loading), in no particular order.
    pub(crate) fn models(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| e.model.as_str())
    }

    /// The resident models with whether each is loaded at `now` (`false`:
    /// its load is still in progress), in no particular order.
    pub(crate) fn states(&self, now: Instant) -> impl Iterator<Item = (&str, bool)> {
        self.entries
            .iter()
            .map(move |e| (e.model.as_str(), e.loaded(now)))
    }

    /// The models evicted and not resident since, most recent first, at
    /// most [`EVICTED_KEPT`](Self::EVICTED_KEPT).
    pub(crate) fn evicted(&self) -> impl Iterator<Item = &str> {
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
    fn loads_through_the_repository_api() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_millis(1);
        let mut r = Residency::new(2);
        r.start_load("a", t0);
        assert_eq!(
            r.lookup("a", t1, false),
            Some(false),
            "loading until finished"
        );
        assert!(r.finish_load("a", t1));
        assert_eq!(r.lookup("a", t1, true), Some(true));
        r.start_load("b", t1 + Duration::from_millis(1));
        r.start_load("c", t1 + Duration::from_millis(2));
        assert_eq!(r.lookup("a", t1, false), None, "the LRU made room");
        assert_eq!(r.evictions(), 1);
        assert!(!r.finish_load("a", t1), "evicted: the load cannot end");
        assert!(r.remove("b"));
        assert!(!r.remove("b"));
        assert_eq!(r.evicted().collect::<Vec<_>>(), ["b", "a"]);
        r.abort_load("c");
        assert_eq!(r.models().count(), 0);
        assert_eq!(r.evictions(), 1, "unloads are not evictions");
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
