//! Readiness (`GET /health`, `/v2/health/ready`, `/ping`): whether the
//! gateway can serve some model now, so that an outer load balancer takes
//! it out of rotation when it cannot — every request would get the
//! gateway's own 503 `no_healthy_backend`.
//!
//! A backend can serve when it is not ejected by health, its own breaker
//! is not open (a backend drained by hand is forced open), it was ever
//! reached (a request's response head came back, or a probe answered,
//! with any status — with placement, a read of its repository instead,
//! without which it loads nothing: `unresponsive.rs`), and
//!
//! * none of its (backend, model) pair breakers is open or half-open — it
//!   serves whatever it serves; or
//! * its last probe succeeded, and either listed no model (a server that
//!   loads models when asked, none resident yet) or listed one whose pair
//!   breaker is not open: closed, or half-open (its cooldown over, a
//!   request may go and close it again).
//!
//! The gateway is ready while one backend can. So a model failing on
//! every backend (its pairs open) leaves the gateway ready for the
//! others, and it answers 503 when every backend has a pair open and
//! either fails its probes (down: the full outage) or holds only models
//! whose pairs are open (up, but failing everything it serves). A
//! backend that comes back is ready again at its first probe that
//! succeeds. Before any pair breaker has tripped, readiness is: some
//! backend reached, not ejected, its breaker not open.
//!
//! Why reached: a backend never reached opens no breaker — with
//! placement, requests fail unsent (`ModelLoadFailed`: its repository
//! could not be read); without, a refused connection is retried
//! elsewhere, and light traffic opens none — and health ejects only a
//! share of the fleet,
//! so a gateway whose backends were all down from the start said ready
//! while every request failed. So the gateway is not ready until some
//! backend has answered: a few milliseconds after start for a fleet that
//! is up (the first probe round runs at once), which is what a Kubernetes
//! readiness probe should see — no traffic to a pod that cannot serve
//! it. Reached is never undone: a fleet whose probes fail for a while,
//! its requests succeeding, does not flap to 503 for it (health and the
//! breakers judge a backend once it was reached).
//!
//! Cost: a read of each backend's status and the probes' lock, until one
//! can serve; the catalog's lock, and the pair map's once per model
//! listed, only for a backend with a pair open.

use tower_model_balance::balance::{BackendStatus, BalancerHandle};
use tower_model_balance::breaker::BreakerState;

use super::catalog::Catalog;
use super::unresponsive::Unresponsive;

/// Whether some backend can serve some model now (see the
/// [module docs](self)); `probes` knows which backends were ever reached.
pub fn can_serve(handle: &BalancerHandle, catalog: &Catalog, probes: &Unresponsive) -> bool {
    handle
        .backends()
        .iter()
        .any(|backend| backend_can_serve(handle, catalog, probes, backend))
}

/// Whether `backend` can serve some model now.
fn backend_can_serve(
    handle: &BalancerHandle,
    catalog: &Catalog,
    probes: &Unresponsive,
    backend: &BackendStatus,
) -> bool {
    if backend.ejected || backend.breaker == BreakerState::Open || !probes.reached(&backend.id) {
        return false;
    }
    if backend.pair_breakers_open == 0 {
        return true;
    }
    // `None`: its last probe failed (or it was never probed).
    let Some(models) = catalog.models_of(&backend.id) else {
        return false;
    };
    models.is_empty()
        || models.iter().any(|model| {
            handle
                .breaker_state(&backend.id, model)
                .is_some_and(|state| state != BreakerState::Open)
        })
}
