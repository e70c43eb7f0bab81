//! One backend's streamed answers: time to first token and time per
//! output token, in lock-free histograms.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::histogram::{quantile_micros, LatencyHistogram, BUCKETS};

/// TTFT and TPOT of one backend's timed event streams that succeeded,
/// since it joined (never cleared). (With feature `metrics` each stream is
/// also recorded through the facade as it ends, by the guard: see
/// [`export`].)
#[derive(Debug)]
pub(crate) struct StreamTimes {
    ttft: LatencyHistogram,
    tpot: LatencyHistogram,
    tpot_sum_us: AtomicU64,
    tpot_count: AtomicU64,
    ttft_sum_us: AtomicU64,
}

/// What a backend's streams took, as the handle reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct StreamFigures {
    pub(crate) streams: u64,
    pub(crate) ttft_mean_ms: Option<f64>,
    pub(crate) ttft_p50_ms: Option<f64>,
    pub(crate) ttft_p99_ms: Option<f64>,
    pub(crate) tpot_mean_ms: Option<f64>,
}

impl StreamTimes {
    pub(crate) fn new() -> Self {
        Self {
            ttft: LatencyHistogram::new(),
            tpot: LatencyHistogram::new(),
            tpot_sum_us: AtomicU64::new(0),
            tpot_count: AtomicU64::new(0),
            ttft_sum_us: AtomicU64::new(0),
        }
    }

    /// Records one stream: its first data frame `ttft` after the pick, and
    /// the mean gap between its data frames after the first (`None`: one
    /// frame).
    pub(crate) fn record(&self, ttft: Duration, tpot: Option<Duration>) {
        self.ttft.record(ttft);
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.ttft_sum_us.fetch_add(micros(ttft), Ordering::Relaxed);
        if let Some(tpot) = tpot {
            self.tpot.record(tpot);
            self.tpot_sum_us.fetch_add(micros(tpot), Ordering::Relaxed);
            self.tpot_count.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Streams recorded, TTFT mean and quantiles, TPOT mean.
    pub(crate) fn figures(&self) -> StreamFigures {
        let mut counts = [0; BUCKETS];
        self.ttft.add_to(&mut counts);
        let streams: u64 = counts.iter().sum();
        let ms = |us: f64| us / 1_000.0;
        let mean = |sum: &AtomicU64, n: u64| {
            (n > 0).then(|| ms(sum.load(Ordering::Relaxed) as f64 / n as f64))
        };
        StreamFigures {
            streams,
            ttft_mean_ms: mean(&self.ttft_sum_us, streams),
            ttft_p50_ms: quantile_micros(&counts, streams, 5_000).map(ms),
            ttft_p99_ms: quantile_micros(&counts, streams, 9_900).map(ms),
            tpot_mean_ms: mean(&self.tpot_sum_us, self.tpot_count.load(Ordering::Relaxed)),
        }
    }
}

/// Records one stream that succeeded on `backend` through the `metrics`
/// facade: its TTFT and, with more than one chunk, its TPOT (called by the
/// guard as the stream's body ends). The series are named, described and
/// bucketed by [`crate::metrics`], which reads the balancer from above;
/// this, on the request path, is the balancer's own.
#[cfg(feature = "metrics")]
pub(crate) fn export(backend: &crate::backend::BackendId, ttft: Duration, tpot: Option<Duration>) {
    let label = || [("backend", backend.to_string())];
    ::metrics::histogram!("model_balance_backend_ttft_seconds", &label())
        .record(ttft.as_secs_f64());
    if let Some(tpot) = tpot {
        ::metrics::histogram!("model_balance_backend_tpot_seconds", &label())
            .record(tpot.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures() {
        let t = StreamTimes::new();
        assert_eq!(t.figures(), StreamFigures::default());
        let ms = Duration::from_millis;
        for i in 1..=100 {
            t.record(ms(i), (i % 2 == 0).then(|| ms(10)));
        }
        let f = t.figures();
        assert_eq!(f.streams, 100);
        assert!((f.ttft_mean_ms.unwrap() - 50.5).abs() < 1e-9);
        let p50 = f.ttft_p50_ms.unwrap();
        assert!((44.0..=57.0).contains(&p50), "{p50}");
        assert!(f.ttft_p99_ms.unwrap() >= 88.0);
        assert!((f.tpot_mean_ms.unwrap() - 10.0).abs() < 1e-9);
        t.record(ms(5), None);
        assert_eq!(t.figures().streams, 101, "the figures are never cleared");
    }
}
