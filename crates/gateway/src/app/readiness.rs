//! Readiness (`GET /health`, `/v2/health/ready`, `/ping`): whether the
//! gateway can serve some model now, so that an outer load balancer takes
//! it out of rotation when it cannot — every request would get the
//! gateway's own 503 `no_healthy_backend`.
//!
//! A backend can serve when it is not ejected by health, its own breaker
//! is not open (a backend drained by hand is forced open), and
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
//! succeeds. Before any pair breaker has tripped, readiness is as it was:
//! some backend not ejected, its breaker not open.
//!
//! Cost: a read of each backend's status; the catalog's lock, and the
//! pair map's once per model listed, only for a backend with a pair
//! open, until one can serve.

use tower_model_balance::balance::{BackendStatus, BalancerHandle};
use tower_model_balance::breaker::BreakerState;

use super::catalog::Catalog;

/// Whether some backend can serve some model now (see the
/// [module docs](self)).
pub fn can_serve(handle: &BalancerHandle, catalog: &Catalog) -> bool {
    handle
        .backends()
        .iter()
        .any(|backend| backend_can_serve(handle, catalog, backend))
}

/// Whether `backend` can serve some model now.
fn backend_can_serve(handle: &BalancerHandle, catalog: &Catalog, backend: &BackendStatus) -> bool {
    if backend.ejected || backend.breaker == BreakerState::Open {
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
