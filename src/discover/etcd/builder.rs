//! Building an `Etcd` source.

use std::sync::Arc;
use std::time::Duration;

use super::connect::Settings;
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
}

impl EtcdBuilder {
    pub(super) fn new(endpoints: Vec<String>, prefix: String) -> Self {
        Self {
            settings: Settings::new(endpoints, prefix),
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

    /// The source, making each backend's endpoint with `make_endpoint`
    /// from the record's address (as [`Dns`](crate::discover::Dns) makes
    /// one from a socket address). Called once per `Insert`: a new
    /// backend, or a changed record.
    ///
    /// # Errors
    ///
    /// [`InvalidConfig`] naming `endpoints` (none, or one with whitespace),
    /// `prefix` (empty, over 1 024 bytes, or with a control character),
    /// `backoff` or `timeout`. A prefix without a trailing `/` is accepted
    /// with a warning: it matches the keys of every longer prefix too.
    pub fn build<E, F>(self, make_endpoint: F) -> Result<Etcd<E>, InvalidConfig>
    where
        F: Fn(&Origin) -> E + Send + Sync + 'static,
    {
        self.settings.validate()?;
        if !self.settings.prefix.ends_with(b"/") {
            let prefix = super::members::shown(&self.settings.prefix);
            tracing::warn!(%prefix, "etcd: a prefix without a trailing `/` also matches the keys of longer ones (`/a` matches `/ab/…`)");
        }
        Ok(Etcd::new(self.settings, Arc::new(make_endpoint)))
    }
}
