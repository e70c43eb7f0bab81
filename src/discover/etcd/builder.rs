//! Building an `Etcd` source.

use std::sync::Arc;
use std::time::Duration;

use super::access::EtcdAccess;
use super::allow::AllowList;
use super::connect::{within, Settings};
use super::error::EtcdError;
use super::source::Etcd;
use crate::endpoint::Origin;
use crate::error::InvalidConfig;

impl Etcd<()> {
    /// A builder for a source on etcd's client `endpoints` (such as
    /// `http://127.0.0.1:2379`; several for a cluster) watching the keys
    /// under `prefix` (such as `/inference/backends/`). Validated by
    /// [`EtcdBuilder::build`].
    pub fn builder(
        endpoints: impl IntoIterator<Item = impl Into<String>>,
        prefix: impl Into<String>,
    ) -> EtcdBuilder {
        EtcdBuilder::new(
            endpoints.into_iter().map(Into::into).collect(),
            prefix.into(),
        )
    }
}

/// Builds an [`Etcd`] source; see [`Etcd::builder`].
#[derive(Debug, Clone)]
#[must_use]
pub struct EtcdBuilder {
    settings: Settings,
    allow: Vec<String>,
}

impl EtcdBuilder {
    pub(super) fn new(endpoints: Vec<String>, prefix: String) -> Self {
        Self {
            settings: Settings::new(endpoints, prefix),
            allow: Vec::new(),
        }
    }

    /// The wait between a broken watch and the next attempt: exponential
    /// from `min`, doubling per failed attempt up to `max`, with full
    /// jitter (uniform between `min` and the current step), back at `min`
    /// once a watch is created. Default 100 ms to 5 s; `0 < min <= max <=
    /// 300 s`, checked by [`build`](Self::build).
    pub fn backoff(mut self, min: Duration, max: Duration) -> Self {
        self.settings.backoff_min = min;
        self.settings.backoff_max = max;
        self
    }

    /// How long connecting, and each snapshot page, may take before the
    /// attempt counts as failed (default 5 s, up to 300 s). A watch's
    /// stream has no timeout: HTTP/2 keep-alive pings (every 10 s, 5 s to
    /// answer) find a dead connection.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeout = timeout;
        self
    }

    /// The user and TLS settings (default: plain `http://`, no user).
    pub fn access(mut self, access: EtcdAccess) -> Self {
        self.settings.access = access;
        self
    }

    /// Admits records whose addresses are in `range` (CIDR, as
    /// `10.0.0.0/8` or `fd00::/8`, or one address); call once per range.
    /// With any range set, a record whose address or `metrics_address`
    /// is outside every range, or names a host rather than an address (it
    /// could resolve anywhere), is refused as
    /// [`RecordError::NotAllowed`](super::RecordError::NotAllowed): logged,
    /// counted in [`EtcdStats::invalid_records`](super::EtcdStats::invalid_records),
    /// its backend out of the fleet, never sent to. Without one, any
    /// address is taken: whoever may write under the prefix chooses where
    /// requests go.
    pub fn allow(mut self, range: impl Into<String>) -> Self {
        self.allow.push(range.into());
        self
    }

    /// Connects to the endpoints in turn and reads the prefix once (a
    /// count), so that a program can stop at start with a clear error
    /// rather than watch for ever with a wrong password. The source
    /// itself never fails: it retries, logging why.
    ///
    /// # Errors
    ///
    /// [`EtcdError::Config`] as [`build`](Self::build),
    /// [`EtcdError::Auth`] when etcd refuses the user (at once, without
    /// trying the other endpoints), else [`EtcdError::Client`] with the
    /// last endpoint's error (TLS refused, no answer) when none answered.
    pub async fn check(&self) -> Result<(), EtcdError> {
        self.settings.validate()?;
        AllowList::parse(&self.allow)?;
        let mut last = None;
        for i in 0..self.settings.endpoints.len() {
            let read = async {
                let mut client = self.settings.connect(i).await?;
                let options = etcd_client::GetOptions::new()
                    .with_range(self.settings.range_end())
                    .with_count_only();
                let call = client.get(self.settings.prefix.clone(), Some(options));
                within(self.settings.timeout, call).await
            };
            match read.await.map_err(EtcdError::from) {
                Ok(_) => return Ok(()),
                Err(error @ EtcdError::Auth(_)) => return Err(error),
                Err(error) => last = Some(error),
            }
        }
        Err(last.unwrap_or(EtcdError::Config(InvalidConfig::new(
            "endpoints",
            "one or more etcd client URLs",
        ))))
    }

    /// The source, making each backend's endpoint with `make_endpoint`
    /// from the record's address (as [`Dns`](crate::discover::Dns) makes
    /// one from a socket address). Called once per `Insert`: a new
    /// backend, or a changed record.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming `endpoints` (none, or one with whitespace;
    /// `https://` mixed with `http://`, or without feature `etcd-tls`),
    /// `prefix` (empty, over 1 024 bytes, or with a control character),
    /// `backoff`, `timeout`, `allow` (not a range) or `access` (TLS
    /// settings for `http://` endpoints, PEM without a certificate or a
    /// key, an empty user or password). A prefix without a trailing `/` is accepted
    /// with a warning: it matches the keys of every longer prefix too.
    pub fn build<E, F>(self, make_endpoint: F) -> Result<Etcd<E>, InvalidConfig>
    where
        F: Fn(&Origin) -> E + Send + Sync + 'static,
    {
        let mut settings = self.settings;
        settings.validate()?;
        settings.allow = AllowList::parse(&self.allow)?;
        if !settings.prefix.ends_with(b"/") {
            let prefix = super::members::shown(&settings.prefix);
            tracing::warn!(%prefix, "etcd: a prefix without a trailing `/` also matches the keys of longer ones (`/a` matches `/ab/…`)");
        }
        Ok(Etcd::new(settings, Arc::new(make_endpoint)))
    }
}
