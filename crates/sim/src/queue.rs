//! Counting the requests that wait and run, and the wait behind a
//! [`Fault::Backlog`](super::Fault::Backlog).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Counts one request in a gauge while it lives: dropped with a request
/// whose connection closed, it leaves the count true.
#[derive(Debug)]
pub(crate) struct Counted<'a>(&'a AtomicU64);

impl<'a> Counted<'a> {
    /// Adds one to `gauge` until dropped.
    pub(crate) fn enter(gauge: &'a AtomicU64) -> Self {
        gauge.fetch_add(1, Ordering::Relaxed);
        Self(gauge)
    }

    /// Leaves the count up for good: whoever takes the request over (a
    /// streamed answer's body) takes it down.
    pub(crate) fn keep(self) {
        std::mem::forget(self);
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The wait behind `waiting` phantom requests each taking `service` (the
/// waiting request's own service time), served `concurrency` at once:
/// `ceil(waiting / concurrency) × service`.
pub(crate) fn backlog_delay(waiting: u32, concurrency: usize, service: Duration) -> Duration {
    let rounds = u64::from(waiting).div_ceil(concurrency.max(1) as u64);
    service.saturating_mul(u32::try_from(rounds).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backlog_rounds() {
        let ms = Duration::from_millis;
        assert_eq!(backlog_delay(0, 4, ms(10)), ms(0));
        assert_eq!(backlog_delay(1, 4, ms(10)), ms(10));
        assert_eq!(backlog_delay(8, 4, ms(10)), ms(20));
        assert_eq!(backlog_delay(9, 4, ms(10)), ms(30));
        assert_eq!(backlog_delay(u32::MAX, 1, Duration::MAX), Duration::MAX);
    }

    #[test]
    fn counted_while_alive() {
        let gauge = AtomicU64::new(0);
        let a = Counted::enter(&gauge);
        let b = Counted::enter(&gauge);
        assert_eq!(gauge.load(Ordering::Relaxed), 2);
        drop(a);
        drop(b);
        assert_eq!(gauge.load(Ordering::Relaxed), 0);
    }
}
