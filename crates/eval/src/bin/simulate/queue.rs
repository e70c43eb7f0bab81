//! The event queue: events in time order, ties in the order they were
//! pushed, so a run is the same for the same seed.
//!
//! Most events come a fixed delay after the moment they are pushed (a
//! request served for its model's inference time, an error after the
//! failure delay), and a simulation pushes at non-decreasing times: such
//! events go to a FIFO lane per delay, already in order, and only the rest
//! to the heap. Popping takes the earliest of the heap's top and the
//! lanes' fronts.
//!
//! The rest (arrivals, a model's load finishing) go to a radix heap
//! (Ahuja, Mehlhorn, Orlin and Tarjan, 1990), which relies on the same
//! monotony: nothing is pushed before the last time popped. Events sit in
//! buckets by the highest bit where their time differs from that last
//! time, and move down a bucket only when it is emptied: appends and
//! sequential scans, where a binary heap of every request in flight
//! (hundreds of thousands when the fleet is all cold) was most of the
//! loop's time in cache misses.

use std::collections::VecDeque;

/// Virtual time in nanoseconds since the start of a run.
pub type Nanos = u64;

struct Entry<E> {
    at: Nanos,
    seq: u64,
    event: E,
}

impl<E> Entry<E> {
    fn key(&self) -> (Nanos, u64) {
        (self.at, self.seq)
    }
}

/// A radix heap of entries, each pushed no earlier than the last popped.
struct Radix<E> {
    /// The time of the last entry popped.
    last: Nanos,
    /// Entries at `last`, by `seq`.
    zero: VecDeque<Entry<E>>,
    /// Entries whose time differs from `last` first at bit `i`.
    buckets: Vec<Vec<Entry<E>>>,
    /// The earliest entry's key.
    min: Option<(Nanos, u64)>,
}

impl<E> Radix<E> {
    fn new() -> Self {
        Self {
            last: 0,
            zero: VecDeque::new(),
            buckets: (0..64).map(|_| Vec::new()).collect(),
            min: None,
        }
    }

    fn bucket(&self, at: Nanos) -> usize {
        63 - (at ^ self.last).leading_zeros() as usize
    }

    fn push(&mut self, entry: Entry<E>) {
        assert!(entry.at >= self.last, "pushed before the last time popped");
        if self.min.is_none_or(|min| entry.key() < min) {
            self.min = Some(entry.key());
        }
        if entry.at == self.last {
            // The latest `seq` yet: `zero` stays in order.
            self.zero.push_back(entry);
        } else {
            let b = self.bucket(entry.at);
            self.buckets[b].push(entry);
        }
    }

    fn pop(&mut self) -> Option<Entry<E>> {
        if self.zero.is_empty() {
            // The lowest non-empty bucket holds the earliest entries:
            // move them down, relative to the earliest time.
            let i = self.buckets.iter().position(|b| !b.is_empty())?;
            let mut bucket = std::mem::take(&mut self.buckets[i]);
            self.last = bucket.iter().map(|e| e.at).min().expect("non-empty");
            for entry in bucket.drain(..) {
                if entry.at == self.last {
                    self.zero.push_back(entry);
                } else {
                    let b = self.bucket(entry.at);
                    self.buckets[b].push(entry);
                }
            }
            self.buckets[i] = bucket;
            self.zero.make_contiguous().sort_unstable_by_key(|e| e.seq);
        }
        let entry = self.zero.pop_front();
        self.min = match self.zero.front() {
            Some(next) => Some(next.key()),
            None => self
                .buckets
                .iter()
                .find(|b| !b.is_empty())
                .and_then(|b| b.iter().map(Entry::key).min()),
        };
        entry
    }
}

/// Lanes kept at most; further delays go to the heap.
const MAX_LANES: usize = 16;

/// Events pushed `delay` after their push time, in push order.
struct Lane<E> {
    delay: Nanos,
    events: VecDeque<Entry<E>>,
}

/// A min-queue of timed events.
pub struct Queue<E> {
    heap: Radix<E>,
    lanes: Vec<Lane<E>>,
    seq: u64,
}

impl<E> Queue<E> {
    pub fn new() -> Self {
        Self {
            heap: Radix::new(),
            lanes: Vec::new(),
            seq: 0,
        }
    }

    /// Schedules `event` at `at`.
    pub fn push(&mut self, at: Nanos, event: E) {
        self.seq += 1;
        self.heap.push(Entry {
            at,
            seq: self.seq,
            event,
        });
    }

    /// Schedules `event` at `now + delay`, `now` being no earlier than any
    /// time pushed at before (as in a simulation's loop).
    pub fn push_after(&mut self, now: Nanos, delay: Nanos, event: E) {
        let lane = match self.lanes.iter().position(|l| l.delay == delay) {
            Some(i) => i,
            None if self.lanes.len() < MAX_LANES => {
                self.lanes.push(Lane {
                    delay,
                    events: VecDeque::new(),
                });
                self.lanes.len() - 1
            }
            None => return self.push(now + delay, event),
        };
        let at = now + delay;
        let events = &mut self.lanes[lane].events;
        if events.back().is_some_and(|last| last.at > at) {
            // Pushed out of time order: the heap keeps it in order.
            return self.push(at, event);
        }
        self.seq += 1;
        events.push_back(Entry {
            at,
            seq: self.seq,
            event,
        });
    }

    /// Where the earliest event is: `None` for the heap, else a lane.
    fn earliest(&self) -> Option<(Nanos, u64, Option<usize>)> {
        let mut best = self.heap.min.map(|(at, seq)| (at, seq, None));
        for (i, lane) in self.lanes.iter().enumerate() {
            if let Some(e) = lane.events.front() {
                if best.is_none_or(|(at, seq, _)| (e.at, e.seq) < (at, seq)) {
                    best = Some((e.at, e.seq, Some(i)));
                }
            }
        }
        best
    }

    /// When the earliest event is due.
    pub fn next_at(&self) -> Option<Nanos> {
        self.earliest().map(|(at, _, _)| at)
    }

    /// The earliest event, first pushed first among equal times.
    pub fn pop(&mut self) -> Option<(Nanos, E)> {
        let entry = match self.earliest()?.2 {
            None => self.heap.pop(),
            Some(lane) => self.lanes[lane].events.pop_front(),
        };
        entry.map(|e| (e.at, e.event))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_time_order_and_ties_in_push_order() {
        let mut q = Queue::new();
        q.push(30, 'c');
        q.push(10, 'a');
        q.push(20, 'x');
        q.push(10, 'b');
        q.push(20, 'y');
        let order: Vec<char> = std::iter::from_fn(|| q.pop().map(|(_, e)| e)).collect();
        assert_eq!(order, ['a', 'b', 'x', 'y', 'c']);
    }

    #[test]
    fn lanes_and_heap_pop_as_one_queue() {
        let mut q = Queue::new();
        q.push(25, 'h');
        q.push_after(0, 10, 'a');
        q.push_after(0, 20, 'b');
        q.push_after(5, 10, 'c');
        q.push(15, 'd');
        q.push_after(5, 20, 'e');
        q.push_after(15, 10, 'f');
        q.push_after(15, 0, 'g');
        let order: Vec<(u64, char)> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            order,
            [
                (10, 'a'),
                (15, 'c'),
                (15, 'd'),
                (15, 'g'),
                (20, 'b'),
                (25, 'h'),
                (25, 'e'),
                (25, 'f')
            ]
        );
    }

    #[test]
    fn a_simulation_pops_what_a_sort_by_time_then_push_order_gives() {
        use rand::rngs::SmallRng;
        use rand::{Rng, SeedableRng};
        let mut rng = SmallRng::seed_from_u64(7);
        let mut q = Queue::new();
        let mut pushed: Vec<(Nanos, u64)> = Vec::new();
        let mut popped = Vec::new();
        let mut now = 0;
        for _ in 0..20_000 {
            for _ in 0..rng.gen_range(0..3) {
                let id = pushed.len() as u64;
                let at = match rng.gen_range(0..3) {
                    0 => {
                        let delay = [0, 10, 140, 5_000][rng.gen_range(0..4)];
                        q.push_after(now, delay, id);
                        now + delay
                    }
                    1 => {
                        q.push(now, id);
                        now
                    }
                    _ => {
                        let bits = rng.gen_range(1..40);
                        let at = now + rng.gen_range(0..1u64 << bits);
                        q.push(at, id);
                        at
                    }
                };
                pushed.push((at, id));
            }
            if let Some((at, id)) = q.pop() {
                assert!(at >= now);
                now = at;
                popped.push((at, id));
            }
        }
        while let Some((at, id)) = q.pop() {
            popped.push((at, id));
        }
        pushed.sort();
        assert_eq!(popped, pushed);
    }
}
