//! What a run measures, and the figures drawn from it.

use crate::queue::Nanos;

/// Counts over the measured requests (those arriving in the run's
/// measurement window), and cold loads over the whole run by second.
#[derive(Debug, Default, Clone)]
pub struct Metrics {
    /// Latency of each measured request, in microseconds (errors at their
    /// time to error).
    pub latencies_us: Vec<u32>,
    pub requests: u64,
    pub inference: u64,
    /// Inference requests served without waiting for a load.
    pub warm: u64,
    pub errors: u64,
    /// Loads started by measured requests.
    pub cold_loads: u64,
    /// Measured requests sent to each backend.
    pub per_backend: Vec<u64>,
    /// Each backend's requests in flight integrated over the measurement
    /// window (request-nanoseconds).
    pub occupancy: Vec<f64>,
    /// Each backend's busy serving slots integrated over the measurement
    /// window (slot-nanoseconds): the work it did.
    pub busy: Vec<f64>,
    /// [`Metrics::occupancy`] from the measurement window's start until
    /// the last request arrived (or the window's end, if sooner).
    pub arrivals_occupancy: Vec<f64>,
    /// The length of that stretch.
    pub arrivals_window_ns: f64,
    /// Loads started in each second of the run (every request).
    pub cold_per_s: Vec<u32>,
    /// With `Some((from, width))`, measured latencies are also kept by
    /// slice of arrival time: `[from + i × width, from + (i + 1) × width)`.
    pub slicing: Option<(Nanos, Nanos)>,
    pub slices: Vec<Vec<u32>>,
}

impl Metrics {
    pub fn new(backends: usize) -> Self {
        Self {
            per_backend: vec![0; backends],
            occupancy: vec![0.0; backends],
            busy: vec![0.0; backends],
            ..Self::default()
        }
    }

    /// A load started at `at`.
    pub fn load_started(&mut self, at: Nanos, measured: bool) {
        let second = (at / 1_000_000_000) as usize;
        if self.cold_per_s.len() <= second {
            self.cold_per_s.resize(second + 1, 0);
        }
        self.cold_per_s[second] += 1;
        self.cold_loads += u64::from(measured);
    }

    /// A measured request that arrived at `arrival` finished after
    /// `latency`.
    pub fn finished(
        &mut self,
        arrival: Nanos,
        latency: Nanos,
        inference: bool,
        ok: bool,
        cold: bool,
    ) {
        self.requests += 1;
        let us = u32::try_from(latency / 1000).unwrap_or(u32::MAX);
        self.latencies_us.push(us);
        if let Some((from, width)) = self.slicing {
            let i = (arrival.saturating_sub(from) / width.max(1)) as usize;
            if self.slices.len() <= i {
                self.slices.resize_with(i + 1, Vec::new);
            }
            self.slices[i].push(us);
        }
        self.errors += u64::from(!ok);
        if inference {
            self.inference += 1;
            self.warm += u64::from(ok && !cold);
        }
    }

    pub fn warm_hit_rate(&self) -> f64 {
        self.warm as f64 / self.inference.max(1) as f64
    }

    pub fn cold_loads_per_1k(&self) -> f64 {
        1000.0 * self.cold_loads as f64 / self.requests.max(1) as f64
    }

    /// The `q` quantile (0..=1) of latency in milliseconds; sorts the
    /// latencies in place the first time.
    pub fn quantile_ms(&mut self, q: f64) -> f64 {
        if self.latencies_us.is_empty() {
            return 0.0;
        }
        if !self.latencies_us.is_sorted() {
            self.latencies_us.sort_unstable();
        }
        let last = self.latencies_us.len() - 1;
        let i = ((q * last as f64).round() as usize).min(last);
        f64::from(self.latencies_us[i]) / 1000.0
    }

    /// The highest `q` quantile of latency over the slices, in ms.
    pub fn worst_slice_quantile_ms(&mut self, q: f64) -> f64 {
        self.slices
            .iter_mut()
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.sort_unstable();
                let last = s.len() - 1;
                f64::from(s[((q * last as f64).round() as usize).min(last)]) / 1000.0
            })
            .fold(0.0, f64::max)
    }

    /// The busiest of `backends`' load — requests in flight, averaged over
    /// the measurement window, the load bounded-load hashing caps — over
    /// their mean.
    pub fn max_mean_load(&self, backends: &[usize]) -> f64 {
        max_over_mean(backends.iter().map(|&b| self.occupancy[b]))
    }

    /// `backends`' mean requests in flight, averaged over the measurement
    /// window while requests arrive (not the drain after the last).
    pub fn mean_in_flight(&self, backends: &[usize]) -> f64 {
        let sum: f64 = backends
            .iter()
            .filter_map(|&b| self.arrivals_occupancy.get(b))
            .sum();
        sum / backends.len().max(1) as f64 / self.arrivals_window_ns.max(1.0)
    }

    /// The busiest of `backends`' utilization — serving slots in use,
    /// averaged over the measurement window — over their mean.
    pub fn max_mean_busy(&self, backends: &[usize]) -> f64 {
        max_over_mean(backends.iter().map(|&b| self.busy[b]))
    }

    /// The busiest of `backends`' request counts over their mean.
    pub fn max_mean_requests(&self, backends: &[usize]) -> f64 {
        max_over_mean(backends.iter().map(|&b| self.per_backend[b] as f64))
    }

    /// The most loads started in one second within `[from, to)` seconds.
    pub fn peak_cold_per_s(&self, from: usize, to: usize) -> u32 {
        let to = to.min(self.cold_per_s.len());
        self.cold_per_s
            .get(from.min(to)..to)
            .and_then(|s| s.iter().copied().max())
            .unwrap_or(0)
    }
}

fn max_over_mean(values: impl Iterator<Item = f64>) -> f64 {
    let (mut max, mut sum, mut n) = (0.0f64, 0.0, 0usize);
    for v in values {
        max = max.max(v);
        sum += v;
        n += 1;
    }
    if sum <= 0.0 {
        return 0.0;
    }
    max / (sum / n as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_from_counts() {
        let mut m = Metrics::new(2);
        m.slicing = Some((0, 50));
        for ms in 1..=100 {
            m.finished(ms, ms * 1_000_000, true, true, ms > 90);
        }
        assert_eq!(m.slices.len(), 3, "arrivals 0..50, 50..100, 100");
        assert_eq!(m.worst_slice_quantile_ms(0.5), 100.0);
        m.load_started(1_500_000_000, true);
        m.load_started(1_600_000_000, false);
        m.per_backend = vec![30, 10];
        m.occupancy = vec![1.0, 3.0];
        m.busy = vec![2.0, 2.0];
        m.arrivals_occupancy = vec![1.0, 3.0];
        m.arrivals_window_ns = 2.0;
        assert_eq!(m.quantile_ms(0.5), 51.0);
        assert_eq!(m.quantile_ms(0.99), 99.0);
        assert!((m.warm_hit_rate() - 0.9).abs() < 1e-12);
        assert_eq!(m.cold_loads_per_1k(), 10.0);
        assert_eq!(m.max_mean_requests(&[0, 1]), 1.5);
        assert_eq!(m.max_mean_load(&[0, 1]), 1.5);
        assert_eq!(m.mean_in_flight(&[0, 1]), 1.0);
        assert_eq!(m.max_mean_busy(&[0, 1]), 1.0);
        assert_eq!((m.peak_cold_per_s(0, 5), m.peak_cold_per_s(2, 5)), (2, 0));
    }
}
