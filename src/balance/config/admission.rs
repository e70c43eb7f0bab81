//! [`AdmissionConfig`]: how many requests each backend takes at once, and
//! what a request does when every backend it could go to is full.

use std::time::Duration;

use crate::error::InvalidConfig;
use crate::route::Urgency;

/// The most requests in flight a [`Limit`] may allow per backend.
const MAX_LIMIT: usize = 1_000_000;
/// The longest a request may wait for room, and the longest retry-after.
const MAX_WAIT: Duration = Duration::from_secs(3_600);
/// The most requests the wait queue may hold.
const MAX_QUEUE: usize = 1_000_000;

/// How many requests in flight a backend is allowed: fixed, or adaptive.
///
/// ```
/// use std::time::Duration;
/// use tower_model_balance::balance::Limit;
///
/// // vLLM started with `--max-num-seqs 64`: room for 64 at once.
/// let fixed = Limit::fixed(64);
/// // Adaptive, between 4 and 256: halves slowly on failures and on calls
/// // slower than 2 s, grows by one per window of successes.
/// let adaptive = Limit::aimd(4, 256).with_latency_threshold(Duration::from_secs(2));
/// assert_ne!(fixed, adaptive);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limit {
    pub(crate) kind: LimitKind,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum LimitKind {
    Fixed(usize),
    Aimd(Aimd),
}

/// The settings of an additive-increase, multiplicative-decrease limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Aimd {
    pub(crate) min: usize,
    pub(crate) max: usize,
    pub(crate) backoff: f64,
    pub(crate) latency_threshold: Duration,
}

impl Limit {
    /// At most `requests` in flight on each backend (1 ..= 1 000 000):
    /// what the server is configured to serve at once (vLLM's
    /// `--max-num-seqs`, Triton's instance count × its dynamic batch size,
    /// MLServer's `parallel_workers`), plus whatever queue in front of it
    /// the operator accepts.
    pub fn fixed(requests: usize) -> Self {
        Self {
            kind: LimitKind::Fixed(requests),
        }
    }

    /// A limit per backend found from its answers, between `min` and `max`
    /// requests (1 ≤ `min` ≤ `max` ≤ 1 000 000), starting at `min`: the
    /// AIMD limit of Netflix's `concurrency-limits` (`AIMDLimit`). A timed
    /// request that fails, is refused as overloaded (429, 503,
    /// `RESOURCE_EXHAUSTED`) or takes longer than the latency threshold
    /// (default 5 s, as `AIMDLimit`'s timeout) multiplies the limit by the
    /// backoff ratio (default 0.9); any other timed success grows it by
    /// `1 / limit` while the backend is at least half full, so one window of
    /// successes adds one request (TCP's congestion avoidance). Only the
    /// balancer's latency sample counts (see
    /// [`Guard::finish`](crate::balance::Guard::finish)), successes and
    /// drops alike, so sampling biases neither way.
    pub fn aimd(min: usize, max: usize) -> Self {
        Self {
            kind: LimitKind::Aimd(Aimd {
                min,
                max,
                backoff: 0.9,
                latency_threshold: Duration::from_secs(5),
            }),
        }
    }

    /// Sets an adaptive limit's backoff ratio (0.5 ..= 0.99; default 0.9).
    /// No effect on a fixed limit.
    pub fn with_backoff(mut self, ratio: f64) -> Self {
        if let LimitKind::Aimd(aimd) = &mut self.kind {
            aimd.backoff = ratio;
        }
        self
    }

    /// Sets the latency past which an adaptive limit counts a success as a
    /// drop (1 ms ..= 1 h; default 5 s): a little above what the server
    /// takes at its best, so that its own queue filling up shows. No
    /// effect on a fixed limit.
    pub fn with_latency_threshold(mut self, threshold: Duration) -> Self {
        if let LimitKind::Aimd(aimd) = &mut self.kind {
            aimd.latency_threshold = threshold;
        }
        self
    }

    /// The limit a backend starts at.
    pub(crate) fn initial(&self) -> usize {
        match self.kind {
            LimitKind::Fixed(n) => n,
            LimitKind::Aimd(aimd) => aimd.min,
        }
    }

    fn validate(&self) -> Result<(), InvalidConfig> {
        let bad = || InvalidConfig::new("admission.limit", "1 ..= 1000000 requests");
        match self.kind {
            LimitKind::Fixed(n) if !(1..=MAX_LIMIT).contains(&n) => Err(bad()),
            LimitKind::Fixed(_) => Ok(()),
            LimitKind::Aimd(a) => {
                if a.min == 0 || a.min > a.max || a.max > MAX_LIMIT {
                    return Err(InvalidConfig::new(
                        "admission.limit",
                        "1 <= min <= max <= 1000000 requests",
                    ));
                }
                if !(0.5..=0.99).contains(&a.backoff) {
                    return Err(InvalidConfig::new(
                        "admission.limit.backoff",
                        "0.5 ..= 0.99",
                    ));
                }
                if !(Duration::from_millis(1)..=MAX_WAIT).contains(&a.latency_threshold) {
                    return Err(InvalidConfig::new(
                        "admission.limit.latency_threshold",
                        "1 ms ..= 1 h",
                    ));
                }
                Ok(())
            }
        }
    }
}

/// Per-backend admission, and what a request does when it finds no room;
/// set with [`BalanceConfigBuilder::admission`](crate::balance::BalanceConfigBuilder::admission).
///
/// | setting | default | range |
/// | --- | --- | --- |
/// | `limit` (requests in flight per backend) | required | see [`Limit`] |
/// | `critical_headroom` (extra room for `Critical`, a share of the limit, rounded up) | 0.25 | 0.0 ..= 10.0 |
/// | `queue_capacity` (requests waiting for room, over every urgency) | 1024 | 0 ..= 1 000 000 |
/// | `max_wait(Normal)` | 0 (shed at once) | 0 ..= 1 h |
/// | `max_wait(High)` | 100 ms | 0 ..= 1 h |
/// | `max_wait(Critical)` | 1 s | 0 ..= 1 h |
/// | `retry_after` (the hint an [`Overloaded`](crate::error::Overloaded) carries) | 1 s | 0 ..= 1 h |
///
/// ```
/// use std::time::Duration;
/// use tower_model_balance::balance::{AdmissionConfig, BalanceConfig, Limit};
/// use tower_model_balance::route::Urgency;
///
/// let admission = AdmissionConfig::builder(Limit::fixed(4))
///     .max_wait(Urgency::Normal, Duration::from_millis(20))
///     .build()
///     .unwrap();
/// let config = BalanceConfig::builder().admission(admission).build().unwrap();
/// # let _ = config;
/// let err = AdmissionConfig::builder(Limit::fixed(0)).build().unwrap_err();
/// assert_eq!(err.field, "admission.limit");
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AdmissionConfig {
    pub(crate) limit: Limit,
    pub(crate) critical_headroom: f64,
    pub(crate) queue_capacity: usize,
    /// By [`Urgency`] index: Normal, High, Critical.
    pub(crate) max_wait: [Duration; 3],
    pub(crate) retry_after: Duration,
}

impl AdmissionConfig {
    /// A builder with `limit` and the defaults above.
    pub fn builder(limit: Limit) -> AdmissionConfigBuilder {
        AdmissionConfigBuilder {
            config: Self {
                limit,
                critical_headroom: 0.25,
                queue_capacity: 1024,
                max_wait: [
                    Duration::ZERO,
                    Duration::from_millis(100),
                    Duration::from_secs(1),
                ],
                retry_after: Duration::from_secs(1),
            },
        }
    }

    /// The most a request of `urgency` waits for room.
    pub(crate) fn max_wait(&self, urgency: Urgency) -> Duration {
        self.max_wait[urgency_index(urgency)]
    }

    /// The room `Critical` has above a backend's limit of `limit`.
    pub(crate) fn headroom(&self, limit: usize) -> usize {
        (limit as f64 * self.critical_headroom).ceil() as usize
    }
}

/// The urgencies in their index order.
#[cfg(feature = "config")]
pub(crate) const URGENCIES: [Urgency; 3] = [Urgency::Normal, Urgency::High, Urgency::Critical];

/// An urgency's place in per-urgency arrays: Normal 0, High 1, Critical 2.
pub(crate) fn urgency_index(urgency: Urgency) -> usize {
    match urgency {
        Urgency::Critical => 2,
        Urgency::High => 1,
        _ => 0,
    }
}

/// Builds a validated [`AdmissionConfig`].
#[derive(Debug, Clone)]
pub struct AdmissionConfigBuilder {
    config: AdmissionConfig,
}

impl AdmissionConfigBuilder {
    /// Sets the room `Critical` requests have above each backend's limit,
    /// as a share of it, rounded up (0.0 ..= 10.0; default 0.25: a backend
    /// limited to 4 takes a fifth `Critical` one). With headroom a
    /// `Critical` request past the others' limit goes into the server's own
    /// queue at once (a wait of at most one service time there); with none
    /// (0.0) it waits here for room, which no arrival of lower urgency takes
    /// while it waits — in the fleet example's `overload` scenario that
    /// starved `Normal` traffic (1 963 `Normal` successes at 3.0 against
    /// 3 261 with the default) for a `Critical` p99 of 85 ms against 66.
    pub fn critical_headroom(mut self, share: f64) -> Self {
        self.config.critical_headroom = share;
        self
    }

    /// Sets how many requests may wait for room at once, over every
    /// urgency (0 ..= 1 000 000; default 1024). A request that finds the
    /// queue full takes the place of the youngest waiting request of a
    /// lower urgency, which fails [`Overloaded`](crate::error::Overloaded);
    /// with none lower, it is shed itself.
    pub fn queue_capacity(mut self, requests: usize) -> Self {
        self.config.queue_capacity = requests;
        self
    }

    /// Sets the most a request of `urgency` waits for room before it fails
    /// [`Overloaded`](crate::error::Overloaded) (0 ..= 1 h; defaults: Normal
    /// 0 — shed at once, High 100 ms, Critical 1 s). Zero sheds at once.
    pub fn max_wait(mut self, urgency: Urgency, wait: Duration) -> Self {
        self.config.max_wait[urgency_index(urgency)] = wait;
        self
    }

    /// Sets the retry-after an [`Overloaded`](crate::error::Overloaded)
    /// error carries (0 ..= 1 h; default 1 s): the gateway's `Retry-After`.
    pub fn retry_after(mut self, wait: Duration) -> Self {
        self.config.retry_after = wait;
        self
    }

    /// Validates the settings.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming the first setting out of its range
    /// (`admission.limit`, `admission.limit.backoff`,
    /// `admission.limit.latency_threshold`, `admission.critical_headroom`,
    /// `admission.queue_capacity`, `admission.max_wait`,
    /// `admission.retry_after`).
    pub fn build(self) -> Result<AdmissionConfig, InvalidConfig> {
        let c = self.config;
        c.limit.validate()?;
        if !(0.0..=10.0).contains(&c.critical_headroom) {
            return Err(InvalidConfig::new(
                "admission.critical_headroom",
                "0.0 ..= 10.0",
            ));
        }
        if c.queue_capacity > MAX_QUEUE {
            return Err(InvalidConfig::new(
                "admission.queue_capacity",
                "0 ..= 1000000",
            ));
        }
        if c.max_wait.iter().any(|w| *w > MAX_WAIT) {
            return Err(InvalidConfig::new("admission.max_wait", "0 ..= 1 h"));
        }
        if c.retry_after > MAX_WAIT {
            return Err(InvalidConfig::new("admission.retry_after", "0 ..= 1 h"));
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_setting_out_of_range_is_named() {
        let field = |b: AdmissionConfigBuilder| b.build().unwrap_err().field;
        let b = || AdmissionConfig::builder(Limit::fixed(4));
        assert_eq!(
            field(AdmissionConfig::builder(Limit::fixed(0))),
            "admission.limit"
        );
        assert_eq!(
            field(AdmissionConfig::builder(Limit::fixed(MAX_LIMIT + 1))),
            "admission.limit"
        );
        assert_eq!(
            field(AdmissionConfig::builder(Limit::aimd(5, 4))),
            "admission.limit"
        );
        assert_eq!(
            field(AdmissionConfig::builder(Limit::aimd(0, 4))),
            "admission.limit"
        );
        assert_eq!(
            field(AdmissionConfig::builder(
                Limit::aimd(1, 4).with_backoff(1.0)
            )),
            "admission.limit.backoff"
        );
        let zero = Limit::aimd(1, 4).with_latency_threshold(Duration::ZERO);
        assert_eq!(
            field(AdmissionConfig::builder(zero)),
            "admission.limit.latency_threshold"
        );
        assert_eq!(
            field(b().critical_headroom(-0.1)),
            "admission.critical_headroom"
        );
        assert_eq!(
            field(b().critical_headroom(f64::NAN)),
            "admission.critical_headroom"
        );
        assert_eq!(
            field(b().queue_capacity(MAX_QUEUE + 1)),
            "admission.queue_capacity"
        );
        let long = MAX_WAIT + Duration::from_secs(1);
        assert_eq!(
            field(b().max_wait(Urgency::High, long)),
            "admission.max_wait"
        );
        assert_eq!(field(b().retry_after(long)), "admission.retry_after");
        let ok = b()
            .max_wait(Urgency::Normal, Duration::from_millis(5))
            .build()
            .unwrap();
        assert_eq!(ok.max_wait(Urgency::Normal), Duration::from_millis(5));
        assert_eq!(ok.max_wait(Urgency::Critical), Duration::from_secs(1));
        assert_eq!((ok.headroom(4), ok.headroom(1)), (1, 1));
        let none = b().critical_headroom(0.0).build().unwrap();
        assert_eq!(none.headroom(4), 0);
    }
}
