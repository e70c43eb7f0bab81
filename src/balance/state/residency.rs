//! Which models a backend holds resident, as far as the balancer knows
//! (pure logic over atomics: no lock, no allocation).
//!
//! A backend's entry is a small table of model hashes with the time each
//! was last sent to, declared or served there — an approximate LRU of the
//! `model_slots` most recent models, mirroring the LRU a multi-model
//! server keeps in GPU memory. A model the balancer routes to a backend is
//! resident there once it is served (the server loads it to serve it), and
//! stops counting as resident once `model_slots` other models have been
//! routed there since. Declared residency (backend metadata, the handle)
//! replaces what was learned.
//!
//! A model routed to a backend is *loading* there until a request for it
//! succeeds there (a response came back: the model is in memory), then
//! *served*; declared models are served at once. Loading is a guess that
//! expires: a model sent to a backend [`LOADING_EXPIRY_MS`] ago and never
//! confirmed there (no success, not in the server's list) is absent again
//! — a server that does not load on demand answers 404 for ever, and
//! "loading" must not count as resident for ever.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// The most models one backend's entry tracks.
pub(crate) const MAX_SLOTS: usize = 16;
/// Models a backend answered 404 for, remembered at once.
const REFUSALS: usize = 4;
/// How long (ms) a backend that answered 404 for a model is not sent it
/// to load (without placement): 30 s.
pub(crate) const REFUSED_MS: u64 = 30_000;
/// Set in a slot's arrival stamp once a request for its model succeeded.
const SERVED: u64 = 1 << 63;
/// How long (ms) a model sent to a backend and never confirmed there
/// counts as loading: 30 s, past the cold load of an adapter or a small
/// model (an LLM's load is tracked by placement's own load, not this
/// guess).
pub(crate) const LOADING_EXPIRY_MS: u64 = 30_000;

/// Whether a backend holds a model, as far as the balancer knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Presence {
    /// Not among its recent models.
    Absent,
    /// Sent there, with no success there since: it may still be loading.
    Loading,
    /// A request for it succeeded there, or it was declared.
    Served,
}

/// Whether a model was known to be served on a backend when a request
/// for it was sent there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Warmth {
    /// Served there: the request is timed as a warm one.
    Warm,
    /// Not yet known served (sent there to load, or still loading): its
    /// success confirms the model served, and its latency is not a warm
    /// request's.
    Cold,
}

/// Models recently routed to or declared on one backend.
#[derive(Debug)]
pub(crate) struct Residency {
    models: [AtomicU64; MAX_SLOTS],
    /// Last use in ms since the fleet's base instant, plus one; 0 = empty.
    stamps: [AtomicU64; MAX_SLOTS],
    /// When each slot's model was first sent here, ms plus one, with
    /// [`SERVED`] set once a request for it succeeded here.
    loaded: [AtomicU64; MAX_SLOTS],
    /// Requests in flight per slot's model, counted only with placement
    /// on (see [`Residency::enter`]); a slot with requests in flight is
    /// never given to another model.
    in_flight: [AtomicU32; MAX_SLOTS],
    slots: AtomicUsize,
    /// Models the backend answered 404 for (hash), and when (ms plus
    /// one; 0 = empty): a server that does not load on demand.
    refused: [AtomicU64; REFUSALS],
    refused_at: [AtomicU64; REFUSALS],
    next_refusal: AtomicUsize,
    /// Set once the backend's own list of its models was taken (a probe,
    /// a response header, metadata, the handle): from then on a model
    /// absent here is known absent, not merely never sent here.
    listed: AtomicBool,
}

impl Residency {
    /// An empty entry tracking `slots` models (clamped to 1 ..= 16).
    pub(crate) fn new(slots: usize) -> Self {
        Self {
            models: Default::default(),
            stamps: Default::default(),
            loaded: Default::default(),
            in_flight: Default::default(),
            slots: AtomicUsize::new(slots.clamp(1, MAX_SLOTS)),
            refused: Default::default(),
            refused_at: Default::default(),
            next_refusal: AtomicUsize::new(0),
            listed: AtomicBool::new(false),
        }
    }

    /// The server answered 404 for the model with hash `key` at `now_ms`:
    /// it is absent, and the server did not load it when asked for it —
    /// for [`REFUSED_MS`] the backend is no place to send it cold.
    pub(crate) fn refuse(&self, key: u64, now_ms: u64) {
        self.forget(key);
        let i = (0..REFUSALS)
            .find(|&i| self.refused[i].load(Ordering::Relaxed) == key)
            .unwrap_or_else(|| self.next_refusal.fetch_add(1, Ordering::Relaxed) % REFUSALS);
        self.refused[i].store(key, Ordering::Relaxed);
        self.refused_at[i].store(now_ms.saturating_add(1), Ordering::Relaxed);
    }

    /// Whether the backend answered 404 for the model with hash `key`
    /// less than [`REFUSED_MS`] before `now_ms()` (read only when it did
    /// at some time), and has not served it since.
    pub(crate) fn refused(&self, key: u64, now_ms: impl FnOnce() -> u64) -> bool {
        let Some(i) = (0..REFUSALS).find(|&i| {
            self.refused[i].load(Ordering::Relaxed) == key
                && self.refused_at[i].load(Ordering::Relaxed) != 0
        }) else {
            return false;
        };
        let at = self.refused_at[i].load(Ordering::Relaxed);
        now_ms().saturating_add(1).saturating_sub(at) < REFUSED_MS
    }

    /// Clears a refusal of the model with hash `key`: it is served here.
    fn unrefuse(&self, key: u64) {
        for i in 0..REFUSALS {
            if self.refused[i].load(Ordering::Relaxed) == key {
                self.refused_at[i].store(0, Ordering::Relaxed);
            }
        }
    }

    /// Sets how many models the backend keeps resident (1 ..= 16).
    pub(crate) fn set_slots(&self, slots: usize) {
        self.slots
            .store(slots.clamp(1, MAX_SLOTS), Ordering::Relaxed);
    }

    fn slots(&self) -> usize {
        self.slots.load(Ordering::Relaxed)
    }

    /// How many models the backend holds at once (its model slots).
    pub(crate) fn capacity(&self) -> usize {
        self.slots()
    }

    /// The slot of the model with hash `key`, if it is resident.
    fn slot(&self, key: u64) -> Option<usize> {
        (0..self.slots()).find(|&i| {
            self.models[i].load(Ordering::Relaxed) == key
                && self.stamps[i].load(Ordering::Relaxed) != 0
        })
    }

    /// Whether the backend's own list of its models was ever taken
    /// ([`Residency::sync`], [`Residency::replace`]): a model absent from
    /// a listed backend is known absent there; from an unlisted one, only
    /// never routed there.
    pub(crate) fn is_listed(&self) -> bool {
        self.listed.load(Ordering::Relaxed)
    }

    /// Notes that the server's own list was taken; a write only the first
    /// time (a residency header syncs on every response, and a store each
    /// time would bounce the cache line between the cores serving them).
    fn mark_listed(&self) {
        if !self.listed.load(Ordering::Relaxed) {
            self.listed.store(true, Ordering::Relaxed);
        }
    }

    /// Whether the model with hash `key` is resident (loading or served).
    pub(crate) fn contains(&self, key: u64) -> bool {
        self.slot(key).is_some()
    }

    /// Whether the model with hash `key` is absent, loading or served at
    /// `now_ms()` (read only for a model not served: loading expires after
    /// [`LOADING_EXPIRY_MS`]).
    pub(crate) fn presence(&self, key: u64, now_ms: impl FnOnce() -> u64) -> Presence {
        let Some(i) = self.slot(key) else {
            return Presence::Absent;
        };
        let loaded = self.loaded[i].load(Ordering::Relaxed);
        if loaded & SERVED != 0 {
            Presence::Served
        } else if now_ms().saturating_add(1).saturating_sub(loaded) < LOADING_EXPIRY_MS {
            Presence::Loading
        } else {
            Presence::Absent
        }
    }

    /// How many models sent here less than `within_ms` before `now_ms()`
    /// have not been served yet: loads likely in progress. `now_ms` is
    /// called only for models not served yet, so the pick path reads the
    /// clock only while a backend may be loading.
    pub(crate) fn loading(&self, now_ms: impl Fn() -> u64, within_ms: u64) -> usize {
        (0..self.slots())
            .filter(|&i| {
                let loaded = self.loaded[i].load(Ordering::Relaxed);
                self.stamps[i].load(Ordering::Relaxed) != 0
                    && loaded & SERVED == 0
                    && now_ms().saturating_add(1).saturating_sub(loaded) < within_ms
            })
            .count()
    }

    /// Records that a request for the model with hash `key` succeeded: it
    /// is served here from now on (while it stays resident).
    pub(crate) fn confirm(&self, key: u64) {
        if let Some(i) = self.slot(key) {
            self.loaded[i].fetch_or(SERVED, Ordering::Relaxed);
        }
        self.unrefuse(key);
    }

    /// How long (ms) the least recently used model has gone unused at
    /// `now_ms` — what loading one more model would evict; `u64::MAX` when
    /// a slot is free.
    pub(crate) fn idle_ms(&self, now_ms: u64) -> u64 {
        let oldest = (0..self.slots())
            .map(|i| self.stamps[i].load(Ordering::Relaxed))
            .min()
            .unwrap_or(0);
        match oldest {
            0 => u64::MAX,
            stamp => now_ms.saturating_sub(stamp - 1),
        }
    }

    /// Records that the model with hash `key` is in use at `now_ms`: its
    /// stamp is refreshed, or it takes the least recently used slot.
    /// Concurrent touches may lose one another (the table is a hint).
    pub(crate) fn touch(&self, key: u64, now_ms: u64) {
        self.touch_with(key, true, || now_ms);
    }

    /// As [`Residency::touch`], reading the time from `now_ms` only if it
    /// is needed: to take a slot, or with `refresh` to renew the stamp of a
    /// model already resident (a sample of the requests does: the stamps
    /// of models in use stay recent without a clock read per request).
    /// Returns whether the model was served here already.
    pub(crate) fn touch_with(&self, key: u64, refresh: bool, now_ms: impl FnOnce() -> u64) -> bool {
        let mut oldest = (0, u64::MAX);
        for i in 0..self.slots() {
            let s = self.stamps[i].load(Ordering::Relaxed);
            if s != 0 && self.models[i].load(Ordering::Relaxed) == key {
                let stamp = if refresh {
                    now_ms().saturating_add(1)
                } else {
                    0
                };
                if s < stamp {
                    self.stamps[i].store(stamp, Ordering::Relaxed);
                }
                return self.loaded[i].load(Ordering::Relaxed) & SERVED != 0;
            }
            if s < oldest.1 && self.in_flight[i].load(Ordering::Relaxed) == 0 {
                oldest = (i, s);
            }
        }
        if oldest.1 == u64::MAX {
            // Every slot's model has requests in flight (placement on):
            // this one is not tracked.
            return false;
        }
        let stamp = now_ms().saturating_add(1);
        // A reader between the two stores may see the new model with the
        // old stamp: resident a moment early, as it is about to be.
        let i = oldest.0;
        self.models[i].store(key, Ordering::Relaxed);
        self.stamps[i].store(stamp, Ordering::Relaxed);
        self.loaded[i].store(stamp, Ordering::Relaxed);
        false
    }

    /// Whether the model with hash `key` was first sent here less than
    /// `within_ms` before `now_ms` (it may still be loading).
    pub(crate) fn arrived_within(&self, key: u64, now_ms: u64, within_ms: u64) -> bool {
        (0..self.slots()).any(|i| {
            self.models[i].load(Ordering::Relaxed) == key
                && self.stamps[i].load(Ordering::Relaxed) != 0
                && now_ms
                    .saturating_add(1)
                    .saturating_sub(self.loaded[i].load(Ordering::Relaxed) & !SERVED)
                    < within_ms
        })
    }

    /// Takes the server's own list of the models it holds (a probe of its
    /// repository, a response header): each listed model is served (a
    /// model not tracked takes the least recently used slot, one already
    /// tracked keeps its place in the LRU order); a served model not
    /// listed is dropped (the server evicted it); a model still loading
    /// is kept (the server lists only models ready). Beyond `slots`,
    /// later models are ignored.
    pub(crate) fn sync(&self, keys: impl IntoIterator<Item = u64>, now_ms: u64) {
        let mut listed = [0u64; MAX_SLOTS];
        let mut n = 0;
        for key in keys.into_iter().take(self.slots()) {
            listed[n] = key;
            n += 1;
        }
        let listed = &listed[..n];
        self.mark_listed();
        for i in 0..self.slots() {
            let served = self.loaded[i].load(Ordering::Relaxed) & SERVED != 0;
            if served && !listed.contains(&self.models[i].load(Ordering::Relaxed)) {
                self.drop_slot(i);
            }
        }
        for &key in listed {
            self.touch_with(key, false, || now_ms);
            self.confirm(key);
        }
    }

    /// Forgets slot `i`'s model; with requests in flight there, only marks
    /// it not served (it stays tracked until they finish).
    fn drop_slot(&self, i: usize) {
        if self.in_flight[i].load(Ordering::Relaxed) == 0 {
            self.stamps[i].store(0, Ordering::Relaxed);
        } else {
            self.loaded[i].fetch_and(!SERVED, Ordering::Relaxed);
        }
    }

    /// The model with hash `key` is not (or no longer) on the backend: a
    /// failed load, a 404 from the server.
    pub(crate) fn forget(&self, key: u64) {
        if let Some(i) = self.slot(key) {
            self.drop_slot(i);
        }
    }

    /// A request for the model with hash `key` starts here; false when the
    /// model is not tracked (nothing counted).
    pub(crate) fn enter(&self, key: u64) -> bool {
        match self.slot(key) {
            Some(i) => {
                self.in_flight[i].fetch_add(1, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// A request counted by [`Residency::enter`] ended.
    pub(crate) fn leave(&self, key: u64) {
        let i = (0..MAX_SLOTS).find(|&i| {
            self.models[i].load(Ordering::Relaxed) == key
                && self.in_flight[i].load(Ordering::Relaxed) > 0
        });
        if let Some(i) = i {
            self.in_flight[i].fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// The tracked model's last-use stamp (ms, 0 when not tracked) and
    /// its requests in flight.
    pub(crate) fn usage(&self, key: u64) -> (u64, u32) {
        match self.slot(key) {
            Some(i) => (
                self.stamps[i].load(Ordering::Relaxed),
                self.in_flight[i].load(Ordering::Relaxed),
            ),
            None => (0, 0),
        }
    }

    /// Replaces the table with `keys` (the first `slots` of them), served.
    pub(crate) fn replace(&self, keys: impl IntoIterator<Item = u64>, now_ms: u64) {
        self.mark_listed();
        for i in 0..MAX_SLOTS {
            self.drop_slot(i);
        }
        for key in keys.into_iter().take(self.slots()) {
            self.touch(key, now_ms);
            self.confirm(key);
        }
    }
}

#[cfg(test)]
mod tests;
