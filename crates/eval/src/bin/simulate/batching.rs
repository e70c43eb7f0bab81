//! The service time of a request on a server that batches (continuous
//! batching, as LLM servers do): every request in service shares the
//! GPU's forward passes, so a larger batch serves more requests per
//! second and each of them more slowly.
//!
//! A request's service time is fixed when it starts, from the batch it
//! joins: its time alone times `1 + slowdown × others`, `others` being the
//! requests already in service on the backend. With `slowdown` 0 (the
//! default scenario) a request takes its time alone whatever the batch.
//! At a slowdown of 0.03 and 32 serving slots a full batch makes each
//! request 1.93× slower than alone and the backend 16.6× faster than one
//! request at a time.

use crate::queue::Nanos;

/// A request's service time: `alone` (its time in a batch of one) slowed
/// by `slowdown` for each of the `others` requests in service beside it.
pub fn service_time(alone: Nanos, others: u32, slowdown: f64) -> Nanos {
    (alone as f64 * slowdown_factor(others, slowdown)).round() as Nanos
}

/// How much slower than alone a request is with `others` beside it.
pub fn slowdown_factor(others: u32, slowdown: f64) -> f64 {
    1.0 + slowdown * f64::from(others)
}

/// Requests per second a backend serves with `batch` requests in service
/// at once, over what it serves one at a time: the batching's gain.
pub fn throughput_gain(batch: u32, slowdown: f64) -> f64 {
    f64::from(batch) / slowdown_factor(batch.saturating_sub(1), slowdown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_larger_batch_serves_more_requests_each_more_slowly() {
        assert_eq!(service_time(100, 0, 0.03), 100, "alone");
        assert_eq!(service_time(100, 31, 0.0), 100, "no batching");
        assert_eq!(service_time(100_000_000, 31, 0.03), 193_000_000);
        assert_eq!(service_time(110_000_000, 1, 0.03), 113_300_000);
        assert!((throughput_gain(32, 0.03) - 32.0 / 1.93).abs() < 1e-12);
        assert_eq!(throughput_gain(1, 0.03), 1.0);
        assert_eq!(throughput_gain(4, 0.0), 4.0);
        let gains: Vec<f64> = (1..=32).map(|b| throughput_gain(b, 0.03)).collect();
        assert!(
            gains.windows(2).all(|w| w[1] > w[0]),
            "throughput rises with the batch"
        );
    }
}
