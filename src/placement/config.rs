//! [`PlacementConfig`]: load timeout, what a request does while its
//! model loads, how often the repository allow-list is refreshed.

use std::time::Duration;

use crate::error::InvalidConfig;

/// What a request does when its model is not served on the owner it was
/// routed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum WhenCold {
    /// Wait for the load on the owner (the default): affinity kept, one
    /// cold start per (backend, model).
    #[default]
    Wait,
    /// Go to a backend past the owners where the model is served, if one
    /// admits the request under the bounded-load cap; the owner's load
    /// starts anyway, so later requests find it warm. Without such a
    /// backend, wait.
    PreferWarm,
}

/// How the balancer places models on demand (see
/// [`placement`](crate::placement)). Built and validated by
/// [`PlacementConfig::builder`].
///
/// | setting | default | range |
/// | --- | --- | --- |
/// | `load_timeout` | 120 s | 1 ms ..= 1 h |
/// | `when_cold` | [`WhenCold::Wait`] | |
/// | `repository_interval` | 30 s | 100 ms ..= 1 day |
/// | `evict` | true | |
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PlacementConfig {
    pub(crate) load_timeout: Duration,
    pub(crate) when_cold: WhenCold,
    pub(crate) repository_interval: Duration,
    pub(crate) evict: bool,
}

impl Default for PlacementConfig {
    fn default() -> Self {
        Self {
            load_timeout: Duration::from_secs(120),
            when_cold: WhenCold::Wait,
            repository_interval: Duration::from_secs(30),
            evict: true,
        }
    }
}

#[cfg_attr(not(feature = "config"), allow(dead_code))]
impl PlacementConfig {
    /// A builder starting from the defaults.
    pub fn builder() -> PlacementConfigBuilder {
        PlacementConfigBuilder {
            policy: Self::default(),
        }
    }

    /// How long a load may take before the waiting requests fail.
    pub(crate) fn load_timeout(&self) -> Duration {
        self.load_timeout
    }

    /// What a request does while its model loads.
    pub(crate) fn when_cold(&self) -> WhenCold {
        self.when_cold
    }

    /// How often each backend's repository (the allow-list) is re-read.
    pub(crate) fn repository_interval(&self) -> Duration {
        self.repository_interval
    }

    /// Whether a full backend unloads a model to make room.
    pub(crate) fn evict(&self) -> bool {
        self.evict
    }
}

/// Builds a [`PlacementConfig`].
#[derive(Debug, Clone)]
pub struct PlacementConfigBuilder {
    policy: PlacementConfig,
}

impl PlacementConfigBuilder {
    /// How long a load may take (default 120 s; 1 ms ..= 1 h). Loading a
    /// large model from object storage takes minutes; a LoRA adapter,
    /// under a second.
    pub fn load_timeout(mut self, timeout: Duration) -> Self {
        self.policy.load_timeout = timeout;
        self
    }

    /// What a request does while its model loads (default
    /// [`WhenCold::Wait`]).
    pub fn when_cold(mut self, when_cold: WhenCold) -> Self {
        self.policy.when_cold = when_cold;
        self
    }

    /// How often each backend's repository is re-read (default 30 s;
    /// 100 ms ..= 1 day).
    pub fn repository_interval(mut self, interval: Duration) -> Self {
        self.policy.repository_interval = interval;
        self
    }

    /// Whether a backend at its model slots unloads a model to make room
    /// (default true). Off, the server's own eviction (if any) decides.
    pub fn evict(mut self, evict: bool) -> Self {
        self.policy.evict = evict;
        self
    }

    /// The policy.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming `load_timeout` or `repository_interval`
    /// when out of its range.
    pub fn build(self) -> Result<PlacementConfig, InvalidConfig> {
        let p = self.policy;
        if !(Duration::from_millis(1)..=Duration::from_secs(3600)).contains(&p.load_timeout) {
            return Err(InvalidConfig::new("load_timeout", "1 ms ..= 1 h"));
        }
        if !(Duration::from_millis(100)..=Duration::from_secs(86_400))
            .contains(&p.repository_interval)
        {
            return Err(InvalidConfig::new(
                "repository_interval",
                "100 ms ..= 1 day",
            ));
        }
        Ok(p)
    }
}
