//! `--etcd URL`: the model-aware balancers learn their servers from etcd
//! rather than from a list. Each server of a `model_aware*` run is
//! registered under `--prefix` with `discover::etcd::Registration` (its
//! address and model slots, under a lease kept alive), the balancer watches
//! the prefix through the `discover::etcd::Etcd` source, the run starts
//! once it routes over every server, and the leases are revoked at its
//! end. The baselines have no discovery: they keep their lists.

use std::time::Duration;

use tokio::time::Instant;
use tower_model_balance::backend::{BackendId, BackendMeta};
use tower_model_balance::balance::BalancerHandle;
use tower_model_balance::discover::etcd::{Etcd, Registration};
use tower_model_balance::endpoint::{Origin, SetOrigin};
use tower_model_balance_sim::ModelServer;

use crate::args::Args;
use crate::endpoint::{client, Endpoint};

/// How long the balancer may take to see every registered server.
const SETTLE_WITHIN: Duration = Duration::from_secs(10);

/// A run's servers, registered in etcd.
pub struct Registered {
    endpoints: Vec<String>,
    prefix: String,
    registrations: Vec<Registration>,
}

/// The key prefix when `--prefix` is not given: this process's own, so
/// that two runs on one etcd do not see each other's servers.
pub fn default_prefix() -> String {
    format!("/tower-model-balance/fleet-{}/", std::process::id())
}

/// Registers `servers` (each `model_slots` slots) for strategy `name`;
/// `None` without `--etcd`, or for a strategy without discovery.
pub async fn register(
    args: &Args,
    name: &str,
    servers: &[ModelServer],
    model_slots: usize,
) -> std::io::Result<Option<Registered>> {
    let Some(url) = &args.etcd else {
        return Ok(None);
    };
    if !name.starts_with("model_aware") {
        return Ok(None);
    }
    let prefix = args.prefix.clone().unwrap_or_else(default_prefix);
    let mut registrations = Vec::with_capacity(servers.len());
    for server in servers {
        let id = BackendId::new(server.name()).map_err(std::io::Error::other)?;
        let meta = BackendMeta::new(id)
            .with_model_slots(model_slots)
            .map_err(std::io::Error::other)?
            .with_address(Origin::http(server.addr()));
        let registration = Registration::builder([url.clone()], prefix.clone(), meta)
            .register()
            .await
            .map_err(|e| std::io::Error::other(format!("registering in etcd at {url}: {e}")))?;
        registrations.push(registration);
    }
    Ok(Some(Registered {
        endpoints: vec![url.clone()],
        prefix,
        registrations,
    }))
}

impl Registered {
    /// The discovery source: every record under the prefix, each sent to
    /// at its address over one shared client (as the list's endpoints).
    pub fn source(&self) -> Etcd<Endpoint> {
        let client = client();
        Etcd::builder(self.endpoints.clone(), self.prefix.clone())
            .build(move |origin: &Origin| SetOrigin::to(client.clone(), origin.clone()))
            .expect("the endpoint and prefix were checked when registering")
    }

    /// Waits until the balancer of strategy `name` (behind `handle`)
    /// routes over every registered server, and says how long that took
    /// (unless `json`).
    pub async fn settled(
        &self,
        handle: &BalancerHandle,
        name: &str,
        json: bool,
    ) -> std::io::Result<()> {
        let start = Instant::now();
        while handle.backends().len() < self.registrations.len() {
            if start.elapsed() > SETTLE_WITHIN {
                return Err(std::io::Error::other(format!(
                    "the balancer saw {} of the {} servers registered under {} within {SETTLE_WITHIN:?}",
                    handle.backends().len(),
                    self.registrations.len(),
                    self.prefix
                )));
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if !json {
            emit!(
                "{name} membership: {} servers from etcd at {} under {}, all seen in {:.1?}",
                self.registrations.len(),
                self.endpoints.join(", "),
                self.prefix,
                start.elapsed()
            );
        }
        Ok(())
    }

    /// Revokes every lease: the records go at once.
    pub async fn deregister(self) {
        for registration in self.registrations {
            if let Err(error) = registration.deregister().await {
                eprintln!("warning: deregistering from etcd: {error}");
            }
        }
    }
}
