//! The bounded queue of requests waiting for room under admission: by
//! urgency, first come first served within one, woken when a request ends.
//!
//! Only saturation touches it: a request ending reads one atomic (the
//! queue's length) and takes the lock only when someone waits.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;

use crate::balance::config::admission::urgency_index;
use crate::route::Urgency;

/// How many waiters one ending request wakes: each retries its pick, and
/// the room that request left is on one backend, which only some of them
/// can use. Those woken go to the back of their urgency's line, so that
/// every waiter is tried in turn.
const WAKE_PER_END: usize = 8;
/// Buckets of the waiting models' hashes, per urgency: an arrival checks
/// its model's bucket (a collision costs a needless shed, 1 in 64).
const MODEL_BUCKETS: usize = 64;

/// One request waiting for room.
#[derive(Debug)]
pub(crate) struct Waiter {
    class: usize,
    /// Its model's bucket.
    bucket: usize,
    /// Set when a request of a higher urgency took its place in a full
    /// queue: it fails `Overloaded`.
    evicted: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Waiter {
    /// Whether it was pushed out of the queue.
    pub(crate) fn evicted(&self) -> bool {
        self.evicted.load(Ordering::Acquire)
    }

    /// Wakes `waker` at the next chance of room.
    pub(crate) fn register(&self, waker: &Waker) {
        let mut slot = lock(&self.waker);
        if !slot.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *slot = Some(waker.clone());
        }
    }

    fn wake(&self) {
        if let Some(waker) = lock(&self.waker).as_ref() {
            waker.wake_by_ref();
        }
    }
}

/// Why a request found no place in the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Full;

/// The wait queue of one balancer.
#[derive(Debug)]
pub(crate) struct WaitQueue {
    capacity: usize,
    /// Waiters now: read without the lock by every request that ends.
    len: AtomicUsize,
    /// Waiters now by urgency index and model bucket: read without the
    /// lock by every arrival while any wait.
    by_model: [[AtomicUsize; MODEL_BUCKETS]; 3],
    /// The most that waited at once.
    peak: AtomicUsize,
    /// Requests that entered the queue.
    entered: AtomicUsize,
    /// By urgency index (Normal, High, Critical), oldest first.
    classes: Mutex<[VecDeque<Arc<Waiter>>; 3]>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing here leaves the state half-changed on a panic.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl WaitQueue {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            len: AtomicUsize::new(0),
            by_model: std::array::from_fn(|_| std::array::from_fn(|_| AtomicUsize::new(0))),
            peak: AtomicUsize::new(0),
            entered: AtomicUsize::new(0),
            classes: Mutex::new(Default::default()),
        }
    }

    /// Queues a request of `urgency` for the model with hash `key`. In a
    /// full queue it takes the place of the youngest waiter of the lowest
    /// urgency below its own, which is woken evicted; with none below,
    /// [`Full`].
    pub(crate) fn enter(
        &self,
        urgency: Urgency,
        key: u64,
        waker: &Waker,
    ) -> Result<Arc<Waiter>, Full> {
        let class = urgency_index(urgency);
        let mut classes = lock(&self.classes);
        let len: usize = classes.iter().map(VecDeque::len).sum();
        if len >= self.capacity {
            let victim = (0..class)
                .find(|&c| !classes[c].is_empty())
                .and_then(|c| classes[c].pop_back())
                .ok_or(Full)?;
            victim.evicted.store(true, Ordering::Release);
            victim.wake();
            self.len.fetch_sub(1, Ordering::Relaxed);
            self.by_model[victim.class][victim.bucket].fetch_sub(1, Ordering::Relaxed);
        }
        let bucket = (key % MODEL_BUCKETS as u64) as usize;
        let waiter = Arc::new(Waiter {
            class,
            bucket,
            evicted: AtomicBool::new(false),
            waker: Mutex::new(Some(waker.clone())),
        });
        classes[class].push_back(waiter.clone());
        self.by_model[class][bucket].fetch_add(1, Ordering::Relaxed);
        let now = self.len.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak.fetch_max(now, Ordering::Relaxed);
        self.entered.fetch_add(1, Ordering::Relaxed);
        Ok(waiter)
    }

    /// Takes `waiter` out (it got room, gave up or was dropped); a waiter
    /// already evicted is out already.
    pub(crate) fn leave(&self, waiter: &Arc<Waiter>) {
        let mut classes = lock(&self.classes);
        let class = &mut classes[waiter.class];
        if let Some(at) = class.iter().position(|w| Arc::ptr_eq(w, waiter)) {
            class.remove(at);
            self.len.fetch_sub(1, Ordering::Relaxed);
            self.by_model[waiter.class][waiter.bucket].fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// A request ended: room for someone. Wakes the first few waiters, the
    /// most urgent first; each retries its pick and stays queued if it
    /// still finds none.
    #[inline]
    pub(crate) fn room_freed(&self) {
        if self.len.load(Ordering::Relaxed) == 0 {
            return;
        }
        self.wake_some();
    }

    #[cold]
    fn wake_some(&self) {
        let mut classes = lock(&self.classes);
        let mut left = WAKE_PER_END;
        for class in classes.iter_mut().rev() {
            // The first few, to the back of the line: the next request to
            // end wakes the next few.
            let n = left.min(class.len());
            class.rotate_left(n);
            class.iter().rev().take(n).for_each(|w| w.wake());
            left -= n;
            if left == 0 {
                break;
            }
        }
    }

    /// Whether a request of `urgency` or more urgent waits for the model
    /// with hash `key` (or one sharing its bucket): an arrival of
    /// `urgency` for it must not take the room it waits for.
    #[inline]
    pub(crate) fn ahead(&self, urgency: Urgency, key: u64) -> bool {
        if self.len.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let bucket = (key % MODEL_BUCKETS as u64) as usize;
        self.by_model[urgency_index(urgency)..]
            .iter()
            .any(|c| c[bucket].load(Ordering::Relaxed) > 0)
    }

    /// Requests waiting now.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// The most requests that waited at once.
    pub(crate) fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// Requests that waited, since the balancer was built.
    pub(crate) fn entered(&self) -> usize {
        self.entered.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    use super::*;

    /// A waker that counts its wakes.
    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn waker() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count::default());
        (count.clone(), Waker::from(count))
    }

    #[test]
    fn a_full_queue_sheds_the_least_urgent_youngest_first() {
        let q = WaitQueue::new(2);
        let (old, w_old) = waker();
        let (young, w_young) = waker();
        let a = q.enter(Urgency::Normal, 1, &w_old).unwrap();
        let b = q.enter(Urgency::Normal, 1, &w_young).unwrap();
        assert_eq!(
            q.enter(Urgency::Normal, 1, &w_young).unwrap_err(),
            Full,
            "none lower"
        );
        let c = q.enter(Urgency::Critical, 1, &waker().1).unwrap();
        assert!(b.evicted() && !a.evicted(), "the youngest Normal went");
        assert_eq!(young.0.load(Ordering::Relaxed), 1, "and was woken");
        assert_eq!(old.0.load(Ordering::Relaxed), 0);
        let d = q.enter(Urgency::High, 1, &waker().1).unwrap();
        assert!(a.evicted());
        assert_eq!(q.enter(Urgency::High, 1, &waker().1).unwrap_err(), Full);
        assert_eq!((q.len(), q.peak(), q.entered()), (2, 2, 4));
        assert!(q.ahead(Urgency::Normal, 1) && q.ahead(Urgency::Critical, 1));
        assert!(
            !q.ahead(Urgency::Normal, 2),
            "another model waits for nothing"
        );
        q.leave(&c);
        assert!(!q.ahead(Urgency::Critical, 1), "only High waits now");
        assert!(q.ahead(Urgency::High, 1));
        q.leave(&b); // evicted already: nothing to take out
        q.leave(&c); // left already
        q.leave(&d);
        assert_eq!(q.len(), 0);
        assert!(!q.ahead(Urgency::Normal, 1));
    }

    #[test]
    fn room_wakes_the_most_urgent_first_and_only_a_few() {
        let q = WaitQueue::new(100);
        let normal: Vec<_> = (0..WAKE_PER_END).map(|_| waker()).collect();
        for (_, w) in &normal {
            q.enter(Urgency::Normal, 1, w).unwrap();
        }
        let (critical, w) = waker();
        q.enter(Urgency::Critical, 1, &w).unwrap();
        q.room_freed();
        assert_eq!(critical.0.load(Ordering::Relaxed), 1);
        let woken = normal
            .iter()
            .filter(|(c, _)| c.0.load(Ordering::Relaxed) == 1)
            .count();
        assert_eq!(
            woken,
            WAKE_PER_END - 1,
            "the oldest Normal ones, after the Critical"
        );
        assert_eq!(normal.last().unwrap().0 .0.load(Ordering::Relaxed), 0);
        // Those woken went to the back: the next end wakes the one left.
        q.room_freed();
        assert_eq!(normal.last().unwrap().0 .0.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn an_empty_queue_takes_nothing_and_zero_capacity_sheds_all() {
        let q = WaitQueue::new(0);
        q.room_freed();
        assert_eq!(q.enter(Urgency::Critical, 1, &waker().1).unwrap_err(), Full);
        assert_eq!(q.peak(), 0);
    }
}
