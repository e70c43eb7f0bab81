//! The sidecar's work, shared by `src/bin/etcd-register.rs` and
//! `tests/gateway/with_etcd.rs`:
//! the backend's record under a lease kept alive, its resident models
//! followed, the lease revoked at the end.

use tower_model_balance::discover::etcd::Registration;
use tower_model_balance::endpoint::Origin;
use tower_model_balance::health::probe::{KServeV2, OpenAiModels};
use tower_model_balance::task::BackgroundTask;
use tower_model_balance_sim::{ModelServer, ServerConfig};

use super::args::{Args, Probe};
use crate::app::EtcdMembers;

/// The models a simulated server (`--sim`) can load: those the gateway's
/// usage examples ask for.
pub const SIM_MODELS: [&str; 3] = ["bge-small", "llama-3-8b", "resnet-50"];

/// A registered backend whose resident models are followed.
#[derive(Debug)]
pub struct Sidecar {
    /// The record in etcd. Dropped (without [`stop`](Self::stop)), it is
    /// no longer renewed: the record goes when the lease expires, as when
    /// the sidecar is killed.
    pub registration: Registration,
    /// The task that reads the server's resident models into the record.
    pub tracker: BackgroundTask,
    /// The simulated server registered (`--sim`), serving while this lives.
    pub sim: Option<ModelServer>,
}

impl Sidecar {
    /// Registers `args.meta` under `args.prefix` with a lease of
    /// `args.ttl`, and follows the server's list of resident models every
    /// `args.interval` (its repository index, or its OpenAI model list).
    ///
    /// With `args.sim`, first starts a simulated server named as the
    /// backend, in explicit model-control mode with [`SIM_MODELS`] in its
    /// repository (a model loads through its repository API, as gateways
    /// with placement load it), and registers its address.
    ///
    /// # Errors
    ///
    /// etcd cannot be reached or refuses (the message says which etcd), or
    /// the simulated server cannot start.
    pub async fn start(args: &Args) -> Result<Self, String> {
        let mut meta = args.meta.clone();
        let mut sim = None;
        if args.sim {
            let config = ServerConfig::builder()
                .explicit_load(true)
                .repository(SIM_MODELS)
                .build()
                .map_err(|e| e.to_string())?;
            let server = ModelServer::start(meta.id().as_str(), config)
                .await
                .map_err(|e| format!("starting the simulated server: {e}"))?;
            meta = meta.with_address(Origin::http(server.addr()));
            sim = Some(server);
        }
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
            Probe::KServe => registration.track_residency(KServeV2::new(), args.interval),
            Probe::OpenAi => registration.track_residency(OpenAiModels::new(), args.interval),
        }
        .map_err(|e| format!("following the resident models: {e}"))?;
        Ok(Self {
            registration,
            tracker,
            sim,
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
