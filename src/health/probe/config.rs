//! How often, how long and how many at once backends are probed.

use std::time::Duration;

use crate::error::InvalidConfig;

/// How a balancer's backends are probed
/// ([`BalancerHandle::spawn_probes`](crate::balance::BalancerHandle::spawn_probes)).
///
/// | field | default | range |
/// | --- | --- | --- |
/// | `interval` (between rounds) | 5 s | 10 ms ..= 1 h |
/// | `timeout` (per probe) | 1 s | 1 ms ..= `interval` |
/// | `jitter` (of the interval, ±) | 0.1 | 0 ..= 0.5 |
/// | `concurrency` (probes at once) | 16 | 1 ..= 10 000 |
///
/// ```
/// use std::time::Duration;
/// use tower_model_balance::health::probe::ProbeConfig;
///
/// let config = ProbeConfig::builder()
///     .interval(Duration::from_secs(1))
///     .timeout(Duration::from_millis(500))
///     .build()
///     .unwrap();
/// // The concurrency left at its default.
/// assert_eq!(config, ProbeConfig::builder()
///     .interval(Duration::from_secs(1))
///     .timeout(Duration::from_millis(500))
///     .concurrency(16)
///     .build()
///     .unwrap());
/// let err = ProbeConfig::builder().timeout(Duration::from_secs(10)).build().unwrap_err();
/// assert_eq!(err.field, "timeout");
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ProbeConfig {
    pub(crate) interval: Duration,
    pub(crate) timeout: Duration,
    pub(crate) jitter: f64,
    pub(crate) concurrency: usize,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        Self {
            interval: Duration::from_secs(5),
            timeout: Duration::from_secs(1),
            jitter: 0.1,
            concurrency: 16,
        }
    }
}

#[cfg_attr(not(feature = "config"), allow(dead_code))]
impl ProbeConfig {
    /// A builder starting from the defaults.
    pub fn builder() -> ProbeConfigBuilder {
        ProbeConfigBuilder {
            config: Self::default(),
        }
    }

    /// Time between the starts of two rounds (each backend probed once a
    /// round), before jitter.
    pub(crate) fn interval(&self) -> Duration {
        self.interval
    }

    /// The longest one probe may take; past it the probe fails with
    /// [`ProbeError::Timeout`](super::ProbeError::Timeout).
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Each interval is drawn uniformly within ± this fraction of it, so
    /// that gateways started together do not probe in step.
    pub(crate) fn jitter(&self) -> f64 {
        self.jitter
    }

    /// The most probes in flight at once.
    pub(crate) fn concurrency(&self) -> usize {
        self.concurrency
    }
}

/// Builds a validated [`ProbeConfig`].
#[derive(Debug, Clone)]
pub struct ProbeConfigBuilder {
    config: ProbeConfig,
}

impl ProbeConfigBuilder {
    /// Time between rounds (10 ms ..= 1 h; default 5 s).
    pub fn interval(mut self, interval: Duration) -> Self {
        self.config.interval = interval;
        self
    }

    /// The longest one probe may take (1 ms ..= `interval`; default 1 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.config.timeout = timeout;
        self
    }

    /// ± fraction of the interval it is jittered by (0 ..= 0.5; default
    /// 0.1).
    pub fn jitter(mut self, jitter: f64) -> Self {
        self.config.jitter = jitter;
        self
    }

    /// The most probes in flight at once (1 ..= 10 000; default 16).
    pub fn concurrency(mut self, probes: usize) -> Self {
        self.config.concurrency = probes;
        self
    }

    /// Validates and builds.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming the first field out of the range its
    /// builder method documents.
    pub fn build(self) -> Result<ProbeConfig, InvalidConfig> {
        let c = self.config;
        if !(Duration::from_millis(10)..=Duration::from_secs(3600)).contains(&c.interval) {
            return Err(InvalidConfig::new("interval", "10 ms ..= 1 h"));
        }
        if !(Duration::from_millis(1)..=c.interval).contains(&c.timeout) {
            return Err(InvalidConfig::new("timeout", "1 ms ..= interval"));
        }
        if !(0.0..=0.5).contains(&c.jitter) {
            return Err(InvalidConfig::new("jitter", "0 ..= 0.5"));
        }
        if !(1..=10_000).contains(&c.concurrency) {
            return Err(InvalidConfig::new("concurrency", "1 ..= 10 000"));
        }
        Ok(c)
    }
}
