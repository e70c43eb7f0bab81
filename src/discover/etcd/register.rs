//! The writer's side: a backend's record under a lease that is kept alive.

use std::sync::{Arc, Mutex as StdMutex, Weak};
use std::time::Duration;

use etcd_client::{Client, GetOptions, PutOptions};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use super::access::EtcdAccess;
use super::connect::{within, Settings};
use super::error::EtcdError;
use super::members::shown;
use super::record::encode_record;
use crate::backend::BackendMeta;
use crate::error::InvalidConfig;
use crate::route::ModelId;

/// Builds a [`Registration`]; see [`Registration::builder`].
#[derive(Debug, Clone)]
#[must_use]
pub struct RegistrationBuilder {
    settings: Settings,
    meta: BackendMeta,
    ttl: Duration,
}

impl RegistrationBuilder {
    /// Default [`ttl`](Self::ttl).
    pub const DEFAULT_TTL: Duration = Duration::from_secs(10);

    /// The lease's time to live, in whole seconds (a fraction rounds up),
    /// 1 s ..= 1 h; default 10 s. A backend that stops renewing (it died,
    /// or lost etcd) leaves every watcher's fleet at most this long after
    /// its last renewal; renewals are sent every third of it. etcd may
    /// raise a TTL below its own minimum (about 1.5 × its election
    /// timeout: 2 s by default).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The user and TLS settings (default: plain `http://`, no user); see
    /// [`EtcdAccess`].
    pub fn access(mut self, access: EtcdAccess) -> Self {
        self.settings.access = access;
        self
    }

    /// How long connecting, and each request, may take (default 5 s, up
    /// to 300 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeout = timeout;
        self
    }

    /// Connects, grants the lease, puts the record `<prefix><id>` under it
    /// and starts the task that keeps it alive (on the current runtime).
    ///
    /// # Errors
    ///
    /// [`EtcdError::Config`] for a setting out of range (`endpoints`,
    /// `prefix`, `timeout`, `ttl`), [`EtcdError::Record`] for metadata
    /// without an address, [`EtcdError::Auth`] when etcd refuses the
    /// user, [`EtcdError::Client`] when etcd cannot be reached or refuses.
    pub async fn register(self) -> Result<Registration, EtcdError> {
        self.settings.validate()?;
        if self.ttl.is_zero() || self.ttl > Duration::from_secs(3600) {
            return Err(InvalidConfig::new("ttl", "1 s ..= 1 h").into());
        }
        encode_record(&self.meta)?;
        let ttl_secs = i64::try_from(self.ttl.as_millis().div_ceil(1000)).unwrap_or(3600);
        let mut clients = Vec::with_capacity(self.settings.endpoints.len());
        for i in 0..self.settings.endpoints.len() {
            clients.push(self.settings.connect(i).await?);
        }
        let mut key = self.settings.prefix.clone();
        key.extend_from_slice(self.meta.id().as_str().as_bytes());
        let inner = Arc::new(Inner {
            timeout: self.settings.timeout,
            key,
            ttl_secs,
            clients,
            registered: self.meta.clone(),
            state: Mutex::new(State {
                meta: self.meta,
                lease: 0,
                at: 0,
            }),
            keeper: StdMutex::new(None),
        });
        {
            let mut state = inner.state.lock().await;
            inner.grant_and_put(&mut state).await?;
        }
        let every = Duration::from_millis(u64::try_from(ttl_secs).unwrap_or(3600) * 1000 / 3);
        let keeper = tokio::spawn(keep_alive(Arc::downgrade(&inner), every));
        *inner.keeper.lock().unwrap_or_else(|e| e.into_inner()) = Some(keeper);
        Ok(Registration { inner })
    }
}

/// A backend's record in etcd, under a lease this process keeps alive:
/// while it lives, every [`Etcd`](super::Etcd) source watching the prefix
/// announces the backend.
///
/// * Dropping it stops the renewals: the record goes when the lease
///   expires (a TTL after the last renewal at most, plus etcd's expiry
///   check, every 500 ms), as it does when the process dies.
/// * [`deregister`](Self::deregister) revokes the lease: the record goes
///   at once.
/// * A lease that expired anyway (etcd unreachable for longer than the
///   TTL) is granted again and the record put again at the next renewal.
///
/// ```no_run
/// use std::time::Duration;
///
/// use tower_model_balance::backend::{BackendId, BackendMeta};
/// use tower_model_balance::discover::etcd::Registration;
/// use tower_model_balance::endpoint::Origin;
/// use tower_model_balance::route::ModelId;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), tower::BoxError> {
/// let meta = BackendMeta::new(BackendId::new("gpu-0")?)
///     .with_address(Origin::parse("http://10.0.0.7:8000")?);
/// let registration = Registration::builder(["http://etcd-0:2379"], "/inference/backends/", meta)
///     .ttl(Duration::from_secs(10))
///     .register()
///     .await?;
/// registration.set_models(vec![ModelId::new("llama-3-8b")?]).await?;
/// registration.deregister().await?;
/// # Ok(()) }
/// ```
pub struct Registration {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("key", &String::from_utf8_lossy(&self.inner.key))
            .field("ttl_secs", &self.inner.ttl_secs)
            .finish_non_exhaustive()
    }
}

struct Inner {
    timeout: Duration,
    key: Vec<u8>,
    ttl_secs: i64,
    /// One client per endpoint, tried in turn (see [`Inner::call`]).
    clients: Vec<Client>,
    /// The metadata as registered (its ID and addresses never change).
    #[cfg_attr(not(feature = "probe"), allow(dead_code))]
    registered: BackendMeta,
    state: Mutex<State>,
    keeper: StdMutex<Option<JoinHandle<()>>>,
}

#[derive(Debug)]
struct State {
    meta: BackendMeta,
    lease: i64,
    /// The endpoint calls go to first: the last that answered.
    at: usize,
}

impl Registration {
    /// A builder registering `meta` (which must have an
    /// [`address`](BackendMeta::with_address)) under `prefix` on etcd's
    /// client `endpoints`.
    pub fn builder(
        endpoints: impl IntoIterator<Item = impl Into<String>>,
        prefix: impl Into<String>,
        meta: BackendMeta,
    ) -> RegistrationBuilder {
        let endpoints = endpoints.into_iter().map(Into::into).collect();
        RegistrationBuilder {
            settings: Settings::new(endpoints, prefix.into()),
            meta,
            ttl: RegistrationBuilder::DEFAULT_TTL,
        }
    }

    /// The lease the record is under now (a new one after an expiry).
    pub async fn lease_id(&self) -> i64 {
        self.inner.state.lock().await.lease
    }

    /// The record as last written.
    pub async fn meta(&self) -> BackendMeta {
        self.inner.state.lock().await.meta.clone()
    }

    /// Sets the resident models (the record's `models`), writing the
    /// record again when they changed. Returns whether it wrote.
    ///
    /// # Errors
    ///
    /// [`EtcdError::Client`] when the write failed; the record stays as it
    /// was, and a later call writes it.
    pub async fn set_models(&self, models: Vec<ModelId>) -> Result<bool, EtcdError> {
        self.inner.set_models(models).await
    }

    /// Follows the backend's own list of resident models: every
    /// `interval`, asks `prober` (such as
    /// [`KServeV2`](crate::health::probe::KServeV2), which reads the
    /// repository index, or [`OpenAiModels`](crate::health::probe::OpenAiModels))
    /// at the record's address, and [sets](Self::set_models) the models it
    /// reports. A failed probe changes nothing (logged). The task ends when
    /// the returned [`BackgroundTask`](crate::task::BackgroundTask) or the
    /// registration is dropped.
    ///
    /// # Errors
    ///
    /// [`NoRuntime`](crate::error::NoRuntime) outside a Tokio runtime
    /// (nothing is started).
    #[cfg(feature = "probe")]
    #[cfg_attr(docsrs, doc(cfg(feature = "probe")))]
    pub fn track_residency<P: crate::health::probe::Prober>(
        &self,
        prober: P,
        interval: Duration,
    ) -> Result<crate::task::BackgroundTask, crate::error::NoRuntime> {
        let runtime = crate::error::NoRuntime::current()?;
        let meta = self.inner.registered.clone();
        let weak = Arc::downgrade(&self.inner);
        let timeout = self.inner.timeout;
        let task = runtime.spawn(async move {
            let Some(address) = meta.address().cloned() else {
                return;
            };
            let mut target = crate::health::probe::ProbeTarget::new(meta.id().clone(), address);
            if let Some(metrics) = meta.metrics_address() {
                target = target.with_metrics_address(metrics.clone());
            }
            loop {
                let report = tokio::time::timeout(timeout, prober.probe(&target)).await;
                let Some(inner) = weak.upgrade() else { return };
                match report {
                    Ok(Ok(report)) => {
                        if let Some(models) = report.resident_models {
                            if let Err(error) = inner.set_models(models).await {
                                tracing::warn!(%error, "etcd: could not write the resident models");
                            }
                        }
                    }
                    Ok(Err(error)) => tracing::warn!(%error, "etcd: residency probe failed"),
                    Err(_) => tracing::warn!("etcd: residency probe timed out"),
                }
                drop(inner);
                tokio::time::sleep(interval).await;
            }
        });
        Ok(crate::task::BackgroundTask::new(task))
    }

    /// Revokes the lease, which deletes the record at once, and stops the
    /// renewals.
    ///
    /// # Errors
    ///
    /// [`EtcdError::Client`] when the revoke failed: the record then goes
    /// when the lease expires, the renewals being stopped all the same.
    pub async fn deregister(self) -> Result<(), EtcdError> {
        self.inner.stop();
        let mut state = self.inner.state.lock().await;
        let lease = state.lease;
        let revoke = |mut c: Client| async move { c.lease_revoke(lease).await };
        self.inner.call(&mut state, revoke).await?;
        Ok(())
    }
}

impl Inner {
    /// `op` on the client of the endpoint that last answered; when it
    /// fails, on the next endpoint's, and so on once round. The client
    /// crate's own balancing sends a call to a dead member as readily as to
    /// a live one: one dead member of two failed 11 of 12 registrations.
    async fn call<T, F, Fut>(&self, state: &mut State, op: F) -> Result<T, etcd_client::Error>
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
    {
        let mut failed = None;
        for _ in 0..self.clients.len() {
            let client = self.clients[state.at % self.clients.len()].clone();
            match within(self.timeout, op(client)).await {
                Ok(value) => return Ok(value),
                Err(error) => failed = Some(error),
            }
            state.at = state.at.wrapping_add(1);
        }
        Err(failed.unwrap_or_else(|| etcd_client::Error::InvalidArgs("no etcd endpoint".into())))
    }

    /// Grants a lease and puts the record under it; a lease whose put
    /// failed is revoked (at best effort: else it expires, holding
    /// nothing).
    async fn grant_and_put(&self, state: &mut State) -> Result<(), EtcdError> {
        let ttl = self.ttl_secs;
        let grant = |mut c: Client| async move { c.lease_grant(ttl, None).await };
        let lease = self.call(state, grant).await?.id();
        let meta = state.meta.clone();
        if let Err(error) = self.put(state, &meta, lease).await {
            let revoke = |mut c: Client| async move { c.lease_revoke(lease).await };
            let _ = self.call(state, revoke).await;
            return Err(error);
        }
        state.lease = lease;
        Ok(())
    }

    async fn put(
        &self,
        state: &mut State,
        meta: &BackendMeta,
        lease: i64,
    ) -> Result<(), EtcdError> {
        let value = encode_record(meta)?;
        let put = |mut c: Client| {
            let (key, value) = (self.key.clone(), value.clone());
            async move {
                c.put(key, value, Some(PutOptions::new().with_lease(lease)))
                    .await
            }
        };
        self.call(state, put).await?;
        Ok(())
    }

    async fn set_models(&self, models: Vec<ModelId>) -> Result<bool, EtcdError> {
        let mut state = self.state.lock().await;
        let next = state.meta.clone().with_resident_models(models);
        if next == state.meta {
            return Ok(false);
        }
        let lease = state.lease;
        self.put(&mut state, &next, lease).await?;
        state.meta = next;
        Ok(true)
    }

    /// One renewal, then a check that the record is still there. When the
    /// renewal fails, etcd is asked whether it still has the lease: one it
    /// lost (expired, or revoked behind this process's back: a TTL of -1)
    /// is granted again and the record put under it. A record deleted
    /// under a live lease (by hand, or by another writer of the same ID)
    /// is put again.
    async fn renew(&self) -> Result<(), EtcdError> {
        let mut state = self.state.lock().await;
        let lease = state.lease;
        // Opening the stream sends a renewal and reads its answer; a lease
        // etcd does not have is an error.
        let keep_alive = |mut c: Client| async move { c.lease_keep_alive(lease).await.map(drop) };
        if let Err(error) = self.call(&mut state, keep_alive).await {
            let asked = |mut c: Client| async move { c.lease_time_to_live(lease, None).await };
            let ttl = self.call(&mut state, asked).await?.ttl();
            if ttl >= 0 {
                return Err(error.into());
            }
            let key = shown(&self.key);
            tracing::warn!(%key, "etcd: the lease is gone; registering again");
            return self.grant_and_put(&mut state).await;
        }
        let count = |mut c: Client| {
            let key = self.key.clone();
            async move { c.get(key, Some(GetOptions::new().with_count_only())).await }
        };
        if self.call(&mut state, count).await?.count() == 0 {
            let key = shown(&self.key);
            tracing::warn!(%key, "etcd: the record was deleted under a live lease; putting it again");
            let meta = state.meta.clone();
            self.put(&mut state, &meta, lease).await?;
        }
        Ok(())
    }

    fn stop(&self) {
        if let Some(keeper) = self.keeper.lock().unwrap_or_else(|e| e.into_inner()).take() {
            keeper.abort();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Renews the lease every `every` until the registration is gone.
async fn keep_alive(inner: Weak<Inner>, every: Duration) {
    let mut wait = every;
    loop {
        tokio::time::sleep(wait).await;
        let Some(inner) = inner.upgrade() else { return };
        wait = match inner.renew().await {
            Ok(()) => every,
            // Soon, not a third of the TTL later: the next call may reach
            // another endpoint, or etcd back.
            Err(error) => {
                tracing::warn!(%error, "etcd: lease renewal failed; retrying");
                RETRY.min(every)
            }
        };
    }
}

/// The wait before another attempt at a call that failed.
const RETRY: Duration = Duration::from_millis(100);
