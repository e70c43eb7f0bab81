//! The sidecar's work, shared by `src/bin/etcd-register.rs` and
//! `tests/gateway/with_etcd.rs`:
//! the backend's record under a lease kept alive, its resident models
//! followed, the lease revoked at the end.

use tower_model_balance::discover::etcd::Registration;
use tower_model_balance::health::probe::{KServeV2, OpenAiModels};
use tower_model_balance::task::BackgroundTask;

use super::args::{Args, Probe};
use crate::app::EtcdMembers;

/// A registered backend whose resident models are followed.
#[derive(Debug)]
pub struct Sidecar {
    /// The record in etcd. Dropped (without [`stop`](Self::stop)), it is
    /// no longer renewed: the record goes when the lease expires, as when
    /// the sidecar is killed.
    pub registration: Registration,
    /// The task that reads the server's resident models into the record.
    pub tracker: BackgroundTask,
}

impl Sidecar {
    /// Registers `args.meta` under `args.prefix` with a lease of
    /// `args.ttl`, and follows the server's list of resident models every
    /// `args.interval` (its repository index, or its OpenAI model list).
    ///
    /// # Errors
    ///
    /// etcd cannot be reached or refuses (the message says which etcd).
    pub async fn start(args: &Args) -> Result<Self, String> {
        let meta = args.meta.clone();
        let mut members = EtcdMembers::new(args.etcd.clone(), args.prefix.clone());
        args.trust.apply(&mut members);
        let access = members.access().map_err(|e| e.to_string())?;
        let registration =
            Registration::builder(args.etcd.iter().cloned(), args.prefix.clone(), meta)
                .access(access)
                .ttl(args.ttl)
                .register()
                .await
                .map_err(|e| format!("registering in etcd at {}: {e}", args.etcd.join(", ")))?;
        let tracker = match args.probe {
            Probe::KServe => registration.track_residency(KServeV2::default(), args.interval),
            Probe::OpenAi => registration.track_residency(OpenAiModels::default(), args.interval),
        }
        .map_err(|e| format!("following the resident models: {e}"))?;
        Ok(Self {
            registration,
            tracker,
        })
    }

    /// Stops following the models and revokes the lease: the record goes
    /// at once, and every gateway drops the backend.
    ///
    /// # Errors
    ///
    /// The revoke failed (etcd away): the record goes when the lease
    /// expires.
    pub async fn stop(self) -> Result<(), String> {
        drop(self.tracker);
        self.registration
            .deregister()
            .await
            .map_err(|e| format!("deregistering: {e} (the record goes when its lease expires)"))
    }
}
