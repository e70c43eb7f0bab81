//! Building a `Dns` source.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::resolve::{HickoryResolver, Resolve};
use super::source::Dns;
use crate::backend::BackendId;
use crate::backend::BackendMeta;
use crate::discover::counters::DiscoverHandle;
use crate::discover::diff::Known;
use crate::error::{BoxError, InvalidConfig};

impl Dns<(), HickoryResolver> {
    /// A builder for a source resolving `hostname` (a DNS name, or an IP
    /// literal) and sending to `port` on every address. Validated by
    /// [`DnsBuilder::build`].
    pub fn builder(hostname: impl Into<String>, port: u16) -> DnsBuilder {
        DnsBuilder::new(hostname.into(), port)
    }
}

/// Builds a [`Dns`] source; from [`Dns::builder`].
#[derive(Debug, Clone)]
pub struct DnsBuilder {
    hostname: String,
    port: u16,
    interval: Duration,
    timeout: Duration,
    weight: u32,
    model_slots: usize,
    gpu_memory_bytes: Option<u64>,
    clear_on_empty: bool,
}

impl DnsBuilder {
    /// Default [`DnsBuilder::interval`]: 5 s.
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);
    /// Default [`DnsBuilder::timeout`]: 10 s.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

    pub(super) fn new(hostname: String, port: u16) -> Self {
        Self {
            hostname,
            port,
            interval: Self::DEFAULT_INTERVAL,
            timeout: Self::DEFAULT_TIMEOUT,
            weight: 1,
            model_slots: BackendMeta::DEFAULT_MODEL_SLOTS,
            gpu_memory_bytes: None,
            clear_on_empty: false,
        }
    }

    /// The time from the end of one resolution to the start of the next
    /// (1 ms ..= 1 day; default 5 s).
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// How long one resolution may take before it counts as failed
    /// (1 ms ..= 1 h; default 10 s). Bounds the resolver's own retries
    /// too.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Every backend's weight (1 ..= 10 000; default 1; see
    /// [`BackendMeta::with_weight`]).
    pub fn weight(mut self, weight: u32) -> Self {
        self.weight = weight;
        self
    }

    /// Every backend's model slots (1 ..= 16; default 4; see
    /// [`BackendMeta::with_model_slots`]).
    pub fn model_slots(mut self, slots: usize) -> Self {
        self.model_slots = slots;
        self
    }

    /// Every backend's GPU memory in bytes (default unknown; see
    /// [`BackendMeta::with_gpu_memory`]).
    pub fn gpu_memory_bytes(mut self, bytes: u64) -> Self {
        self.gpu_memory_bytes = Some(bytes);
        self
    }

    /// Whether an answer with no address removes every backend (`true`)
    /// or keeps the last set like a failure does (`false`, the default).
    pub fn clear_on_empty(mut self, clear: bool) -> Self {
        self.clear_on_empty = clear;
        self
    }

    /// Builds the source with the default resolver,
    /// [`HickoryResolver::from_system_conf`]; `make_endpoint` makes the
    /// endpoint of each new address.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] as [`DnsBuilder::build_with`] says, or
    /// [`SystemConfError`](super::SystemConfError) when the system's DNS
    /// configuration cannot be read (on Unix: `/etc/resolv.conf` absent or
    /// malformed); tell them apart with `error.is::<InvalidConfig>()`.
    pub fn build<E>(
        self,
        make_endpoint: impl Fn(&SocketAddr) -> E + Send + Sync + 'static,
    ) -> Result<Dns<E, HickoryResolver>, BoxError> {
        self.validate()?;
        let resolver = HickoryResolver::from_system_conf()?;
        Ok(self.build_with(resolver, make_endpoint)?)
    }

    /// Builds the source over `resolver`; `make_endpoint` makes the
    /// endpoint of each new address.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming the field: `hostname` (empty, over 253
    /// bytes, or with whitespace or control characters), `port` (0),
    /// `interval` (outside 1 ms ..= 1 day), `timeout` (outside 1 ms ..=
    /// 1 h), `weight` (outside 1 ..= 10 000),
    /// `model_slots` (outside 1 ..= 16).
    pub fn build_with<E, R: Resolve>(
        self,
        resolver: R,
        make_endpoint: impl Fn(&SocketAddr) -> E + Send + Sync + 'static,
    ) -> Result<Dns<E, R>, InvalidConfig> {
        let template = self.validate()?;
        Ok(Dns {
            resolver: Arc::new(resolver),
            hostname: Arc::from(self.hostname),
            port: self.port,
            interval: self.interval,
            timeout: self.timeout,
            clear_on_empty: self.clear_on_empty,
            template,
            make_endpoint: Arc::new(make_endpoint),
            known: Known::default(),
            pending: VecDeque::new(),
            lookup: None,
            next: None,
            counters: DiscoverHandle::default(),
        })
    }

    /// Checks every field; returns the metadata template (its ID is a
    /// placeholder, replaced per address).
    fn validate(&self) -> Result<BackendMeta, InvalidConfig> {
        valid_hostname(&self.hostname)?;
        if self.port == 0 {
            return Err(InvalidConfig::new("port", "1 ..= 65535"));
        }
        // Bounded: `now + interval` must not overflow the clock.
        let ms = Duration::from_millis(1);
        if !(ms..=Duration::from_secs(86_400)).contains(&self.interval) {
            return Err(InvalidConfig::new("interval", "1 ms ..= 1 day"));
        }
        if !(ms..=Duration::from_secs(3_600)).contains(&self.timeout) {
            return Err(InvalidConfig::new("timeout", "1 ms ..= 1 h"));
        }
        // "dns" is a valid ID; the error arm is not reached.
        let placeholder = BackendId::new("dns")?;
        let mut template = BackendMeta::new(placeholder)
            .with_weight(self.weight)?
            .with_model_slots(self.model_slots)?;
        if let Some(bytes) = self.gpu_memory_bytes {
            template = template.with_gpu_memory(bytes);
        }
        Ok(template)
    }
}

/// Whether `hostname` is worth asking a resolver about: 1 to 253 bytes,
/// no whitespace or control character.
fn valid_hostname(hostname: &str) -> Result<(), InvalidConfig> {
    let forbidden = |c: char| c.is_control() || c.is_whitespace();
    if hostname.is_empty() || hostname.len() > 253 || hostname.chars().any(forbidden) {
        return Err(InvalidConfig::new(
            "hostname",
            "1 to 253 bytes without whitespace or control characters",
        ));
    }
    Ok(())
}
