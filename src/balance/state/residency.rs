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

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

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
mod tests {
    use super::*;

    #[test]
    fn learns_and_forgets_in_lru_order() {
        let r = Residency::new(3);
        assert!(!r.contains(1));
        assert_eq!(r.idle_ms(0), u64::MAX, "a free slot");
        for (t, key) in [1, 2, 3].into_iter().enumerate() {
            r.touch(key, t as u64);
        }
        assert!([1, 2, 3].iter().all(|&k| r.contains(k)));
        assert_eq!(r.idle_ms(10), 10, "model 1, last used at 0");
        r.touch(1, 10); // 1 is used again: 2 is now the least recent.
        r.touch(4, 11);
        assert!(r.contains(1) && r.contains(3) && r.contains(4));
        assert!(!r.contains(2), "the least recently used model was evicted");
        assert!(r.arrived_within(4, 12, 2), "sent at 11");
        assert!(!r.arrived_within(4, 13, 2));
        assert!(
            !r.arrived_within(1, 12, 10),
            "sent at 0; using it at 10 does not renew its arrival"
        );
        r.replace([7, 8, 9, 10], 20);
        assert!(r.contains(7) && r.contains(8) && r.contains(9));
        assert!(!r.contains(10) && !r.contains(1), "only `slots` are kept");
    }

    #[test]
    fn a_servers_list_drops_evicted_models_and_keeps_loading_ones() {
        let r = Residency::new(3);
        for (t, key) in [1, 2, 3].into_iter().enumerate() {
            r.touch(key, t as u64);
        }
        r.confirm(1);
        r.confirm(2);
        // The server lists 1 (and 9, loaded by another gateway), not 2
        // (evicted) nor 3 (still loading, sent by us).
        r.sync([9, 1], 10);
        assert_eq!(r.presence(1, || 10), Presence::Served);
        assert_eq!(r.presence(9, || 10), Presence::Served);
        assert_eq!(
            r.presence(2, || 10),
            Presence::Absent,
            "evicted on the server"
        );
        assert_eq!(r.presence(3, || 10), Presence::Loading, "still loading");
        assert_eq!(r.idle_ms(10), 10, "1 kept its place: last used at 0");
    }

    #[test]
    fn unsampled_touches_take_slots_but_leave_stamps() {
        let r = Residency::new(2);
        let read = std::cell::Cell::new(0);
        let clock = |ms| {
            read.set(read.get() + 1);
            ms
        };
        r.touch_with(1, false, || clock(5));
        assert_eq!(read.get(), 1, "taking a slot reads the clock");
        r.touch_with(1, false, || clock(50));
        assert_eq!(read.get(), 1, "a resident model unsampled: no read");
        assert_eq!(r.idle_ms(60), u64::MAX, "one slot still free");
        r.touch(2, 6);
        assert_eq!(r.idle_ms(60), 55, "model 1's stamp stayed at 5");
        r.touch_with(1, true, || clock(40));
        assert_eq!(read.get(), 2);
        assert_eq!(r.idle_ms(60), 54, "renewed: model 2 (6) is the oldest");
    }

    #[test]
    fn a_model_is_loading_until_confirmed_and_declared_ones_are_served() {
        let r = Residency::new(3);
        assert_eq!(r.presence(1, || 10), Presence::Absent);
        assert!(!r.touch_with(1, false, || 100), "just sent: not served");
        r.touch(2, 100);
        assert_eq!(r.presence(1, || 10), Presence::Loading);
        assert_eq!(r.loading(|| 150, 2_000), 2);
        assert_eq!(
            r.presence(2, || 100 + LOADING_EXPIRY_MS - 2),
            Presence::Loading
        );
        assert_eq!(
            r.presence(2, || 100 + LOADING_EXPIRY_MS),
            Presence::Absent,
            "never confirmed: loading expired"
        );
        assert_eq!(r.loading(|| 2_100, 2_000), 0, "past the grace: not counted");
        r.confirm(1);
        assert_eq!(r.presence(1, || 10), Presence::Served);
        assert!(r.touch_with(1, false, || 0), "served already");
        assert_eq!(r.loading(|| 150, 2_000), 1);
        assert!(
            r.arrived_within(1, 150, 2_000),
            "the served bit is not time"
        );
        r.confirm(9); // not resident: nothing to confirm
        assert_eq!(r.presence(9, || 10), Presence::Absent);
        r.replace([7], 200);
        assert_eq!(r.presence(7, || 200), Presence::Served, "declared");
        let unread = || panic!("every model is served: no clock needed");
        assert_eq!(r.loading(unread, 2_000), 0);
    }

    #[test]
    fn a_refusal_lasts_until_served_or_expired() {
        let r = Residency::new(2);
        r.touch(1, 0);
        r.confirm(1);
        assert!(!r.refused(1, || 0));
        r.refuse(1, 100);
        assert_eq!(r.presence(1, || 100), Presence::Absent, "a 404 is absence");
        assert!(r.refused(1, || 100 + REFUSED_MS - 2));
        assert!(!r.refused(1, || 100 + REFUSED_MS), "expired");
        assert!(!r.refused(2, || 100), "another model");
        r.refuse(2, 200);
        r.touch(2, 300);
        r.confirm(2);
        assert!(!r.refused(2, || 300), "served there since");
        for key in 10..10 + REFUSALS as u64 {
            r.refuse(key, 400);
        }
        assert!((10..10 + REFUSALS as u64).all(|k| r.refused(k, || 400)));
        assert!(!r.refused(1, || 400), "the oldest refusal made room");
    }

    #[test]
    fn hash_zero_is_a_model_not_an_empty_slot() {
        let r = Residency::new(2);
        assert!(!r.contains(0));
        r.touch(0, 0);
        assert!(r.contains(0));
    }

    #[test]
    fn slots_are_clamped() {
        let r = Residency::new(0);
        r.touch(1, 0);
        r.touch(2, 1);
        assert!(!r.contains(1) && r.contains(2), "at least one slot");
        r.set_slots(100);
        for key in 0..20 {
            r.touch(key + 10, 2 + key);
        }
        assert_eq!((10..30).filter(|&k| r.contains(k)).count(), MAX_SLOTS);
    }
}
