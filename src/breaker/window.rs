//! Sliding windows of recorded calls: the last N calls, or the calls of
//! the last duration counted in buckets (as resilience4j's count- and
//! time-based windows). Pure logic; `now` is passed in.

use std::time::Duration;

use tokio::time::Instant;

use super::config::SlidingWindow;

/// What one recorded call adds to a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    /// A failure or an overload.
    pub(crate) failed: bool,
    /// The call was timed (not a cold load, not untimed).
    pub(crate) timed: bool,
    /// Timed, and at least the slow-call duration.
    pub(crate) slow: bool,
}

impl Entry {
    fn bits(self) -> u8 {
        u8::from(self.failed) | u8::from(self.timed) << 1 | u8::from(self.slow) << 2
    }

    fn from_bits(bits: u8) -> Self {
        Self {
            failed: bits & 1 != 0,
            timed: bits & 2 != 0,
            slow: bits & 4 != 0,
        }
    }
}

/// Counts over a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    pub(crate) calls: u64,
    pub(crate) failures: u64,
    pub(crate) timed: u64,
    pub(crate) slow: u64,
}

impl Totals {
    fn add(&mut self, e: Entry) {
        self.calls += 1;
        self.failures += u64::from(e.failed);
        self.timed += u64::from(e.timed);
        self.slow += u64::from(e.slow);
    }

    fn sub(&mut self, e: Entry) {
        self.calls -= 1;
        self.failures -= u64::from(e.failed);
        self.timed -= u64::from(e.timed);
        self.slow -= u64::from(e.slow);
    }

    fn merge(&mut self, other: &Totals) {
        self.calls += other.calls;
        self.failures += other.failures;
        self.timed += other.timed;
        self.slow += other.slow;
    }

    /// Failures over calls, in `[0, 1]` (0 with no call).
    pub(crate) fn failure_rate(&self) -> f64 {
        ratio(self.failures, self.calls)
    }

    /// Slow calls over timed calls, in `[0, 1]` (0 with no timed call).
    pub(crate) fn slow_call_rate(&self) -> f64 {
        ratio(self.slow, self.timed)
    }

    /// The slow-call rate once there are `minimum` timed calls, else 0:
    /// cold loads are untimed, and 2 lost hedge races of 2 timed calls
    /// are no rate (as the failure rate needs `minimum` calls).
    pub(crate) fn slow_call_rate_over(&self, minimum: usize) -> f64 {
        if self.timed < minimum as u64 {
            return 0.0;
        }
        self.slow_call_rate()
    }
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// A sliding window of calls.
#[derive(Debug, Clone)]
pub(crate) enum Window {
    Count(CountWindow),
    Time(TimeWindow),
}

impl Window {
    pub(crate) fn new(kind: SlidingWindow) -> Self {
        match kind {
            SlidingWindow::Count { calls } => Window::Count(CountWindow::new(calls)),
            SlidingWindow::Time { duration, buckets } => {
                Window::Time(TimeWindow::new(duration, buckets))
            }
        }
    }

    pub(crate) fn push(&mut self, entry: Entry, now: Instant) {
        match self {
            Window::Count(w) => w.push(entry),
            Window::Time(w) => w.push(entry, now),
        }
    }

    pub(crate) fn totals(&self, now: Instant) -> Totals {
        match self {
            Window::Count(w) => w.totals,
            Window::Time(w) => w.totals(now),
        }
    }

    pub(crate) fn clear(&mut self) {
        match self {
            Window::Count(w) => w.clear(),
            Window::Time(w) => w.clear(),
        }
    }

    /// Whether one more success that is not slow would change nothing: a
    /// full count window holding no failure and no slow call. (A time
    /// window counts every call, so it never is.)
    pub(crate) fn saturated(&self) -> bool {
        match self {
            Window::Count(w) => {
                w.len == w.entries.len() && w.totals.failures == 0 && w.totals.slow == 0
            }
            Window::Time(_) => false,
        }
    }
}

/// The last `capacity` calls, as a ring buffer with running totals;
/// allocated once.
#[derive(Clone)]
pub(crate) struct CountWindow {
    entries: Box<[u8]>,
    next: usize,
    len: usize,
    totals: Totals,
}

impl std::fmt::Debug for CountWindow {
    /// The totals, not the (up to 10 000) entries.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountWindow")
            .field("capacity", &self.entries.len())
            .field("len", &self.len)
            .field("totals", &self.totals)
            .finish()
    }
}

impl CountWindow {
    fn new(capacity: usize) -> Self {
        Self {
            entries: vec![0; capacity.max(1)].into_boxed_slice(),
            next: 0,
            len: 0,
            totals: Totals::default(),
        }
    }

    fn push(&mut self, entry: Entry) {
        if self.len == self.entries.len() {
            self.totals.sub(Entry::from_bits(self.entries[self.next]));
        } else {
            self.len += 1;
        }
        self.entries[self.next] = entry.bits();
        self.totals.add(entry);
        self.next = (self.next + 1) % self.entries.len();
    }

    fn clear(&mut self) {
        self.next = 0;
        self.len = 0;
        self.totals = Totals::default();
    }
}

/// The calls of the last `buckets × bucket` of time: each bucket counts
/// the calls of one slice and is reset when its slot comes round again.
#[derive(Debug, Clone)]
pub(crate) struct TimeWindow {
    /// Origin of the bucket numbering: the first call's time.
    base: Option<Instant>,
    bucket_ns: u64,
    /// Slot `i % len` holds bucket number `i` (the slice starting
    /// `i × bucket` after `base`) if its `number` says so.
    buckets: Box<[Bucket]>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    number: u64,
    totals: Totals,
}

impl TimeWindow {
    fn new(duration: Duration, buckets: u32) -> Self {
        let buckets = buckets.max(1);
        let bucket_ns = (duration / buckets).as_nanos().max(1);
        Self {
            base: None,
            bucket_ns: u64::try_from(bucket_ns).unwrap_or(u64::MAX),
            buckets: vec![Bucket::default(); buckets as usize].into_boxed_slice(),
        }
    }

    /// The number of the bucket `now` falls in (0 before the first call).
    fn number(&self, now: Instant) -> u64 {
        let Some(base) = self.base else { return 0 };
        let ns = now.saturating_duration_since(base).as_nanos();
        u64::try_from(ns / u128::from(self.bucket_ns)).unwrap_or(u64::MAX)
    }

    fn push(&mut self, entry: Entry, now: Instant) {
        self.base.get_or_insert(now);
        let number = self.number(now);
        let len = self.buckets.len() as u64;
        let bucket = &mut self.buckets[(number % len) as usize];
        if bucket.number != number {
            *bucket = Bucket {
                number,
                totals: Totals::default(),
            };
        }
        bucket.totals.add(entry);
    }

    fn totals(&self, now: Instant) -> Totals {
        let number = self.number(now);
        let len = self.buckets.len() as u64;
        let mut totals = Totals::default();
        for bucket in self.buckets.iter() {
            // Buckets of the last `len` slices, not one from the future
            // (a call recorded with a later `now` than this read's).
            if bucket.number <= number && number - bucket.number < len {
                totals.merge(&bucket.totals);
            }
        }
        totals
    }

    fn clear(&mut self) {
        self.buckets.fill(Bucket::default());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: Entry = Entry {
        failed: false,
        timed: true,
        slow: false,
    };
    const FAIL: Entry = Entry {
        failed: true,
        timed: true,
        slow: false,
    };
    const SLOW: Entry = Entry {
        failed: false,
        timed: true,
        slow: true,
    };
    const UNTIMED: Entry = Entry {
        failed: false,
        timed: false,
        slow: false,
    };

    #[test]
    fn a_count_window_keeps_the_last_calls() {
        let now = Instant::now();
        let mut w = Window::new(SlidingWindow::Count { calls: 3 });
        for e in [FAIL, FAIL, OK, SLOW] {
            w.push(e, now);
        }
        let t = w.totals(now);
        assert_eq!((t.calls, t.failures, t.timed, t.slow), (3, 1, 3, 1));
        w.push(UNTIMED, now);
        w.push(UNTIMED, now);
        let t = w.totals(now);
        assert_eq!((t.calls, t.failures, t.timed, t.slow), (3, 0, 1, 1));
        assert_eq!(t.slow_call_rate(), 1.0, "over timed calls only");
        assert!(!w.saturated(), "a slow call is in the window");
        w.push(OK, now);
        assert!(w.saturated());
    }

    #[test]
    fn a_time_window_forgets_calls_older_than_its_duration() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut w = Window::new(SlidingWindow::Time {
            duration: s(10),
            buckets: 5,
        });
        w.push(FAIL, t0);
        w.push(OK, t0 + s(3));
        w.push(OK, t0 + s(9));
        assert_eq!(w.totals(t0 + s(9)).calls, 3);
        let t = w.totals(t0 + s(10));
        assert_eq!((t.calls, t.failures), (2, 0), "the first bucket expired");
        assert_eq!(w.totals(t0 + s(13)).calls, 1);
        assert_eq!(w.totals(t0 + s(20)).calls, 0);
        w.push(FAIL, t0 + s(20));
        assert_eq!(
            w.totals(t0 + s(20)).failures,
            1,
            "a reused slot starts over"
        );
        assert!(!w.saturated(), "a time window never skips a record");
        w.clear();
        assert_eq!(w.totals(t0 + s(20)), Totals::default());
    }

    #[test]
    fn a_time_window_sums_every_count_over_its_buckets() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut w = Window::new(SlidingWindow::Time {
            duration: s(10),
            buckets: 5,
        });
        for (e, at) in [(SLOW, 0), (FAIL, 2), (UNTIMED, 4), (SLOW, 6), (OK, 8)] {
            w.push(e, t0 + s(at));
        }
        let want = Totals {
            calls: 5,
            failures: 1,
            timed: 4,
            slow: 2,
        };
        assert_eq!(w.totals(t0 + s(9)), want, "one call in each bucket");
    }

    #[test]
    fn a_count_window_shows_its_totals_not_its_entries() {
        let mut w = CountWindow::new(3);
        w.push(FAIL);
        let shown = format!("{w:?}");
        for part in ["CountWindow", "capacity: 3", "len: 1", "failures: 1"] {
            assert!(shown.contains(part), "{part} in {shown}");
        }
    }

    #[test]
    fn a_time_window_rate_does_not_depend_on_request_rate() {
        let t0 = Instant::now();
        let mut w = Window::new(SlidingWindow::Time {
            duration: Duration::from_secs(1),
            buckets: 10,
        });
        // 1000 calls a second, one in four failing, for 5 s.
        for i in 0..5_000u64 {
            let e = if i % 4 == 0 { FAIL } else { OK };
            w.push(e, t0 + Duration::from_millis(i));
        }
        let t = w.totals(t0 + Duration::from_millis(4_999));
        assert!((900..=1_000).contains(&t.calls), "{t:?}");
        assert!((t.failure_rate() - 0.25).abs() < 0.01);
    }
}
