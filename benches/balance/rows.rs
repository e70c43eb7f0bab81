//! The routers the `balance` rows time: this crate's balancer and tower's
//! P2C, with and without `Buffer`, over always-ready backends.

use std::time::Duration;

use tokio::runtime::Runtime;
use tower::balance::p2c::Balance;
use tower::buffer::Buffer;
use tower::discover::ServiceList;
use tower::load::{CompleteOnResponse, PeakEwmaDiscover};
use tower_model_balance::backend::{Backend, BackendId, BackendMeta};
use tower_model_balance::balance::{BalanceConfig, BalanceStats, ModelBalancer};

use crate::ready::{self, Ready};
use crate::{P2c, P2cBuffer};

pub fn ids(n: usize) -> impl Iterator<Item = BackendId> {
    (0..n).map(|i| BackendId::new(&format!("backend-{i}")).expect("a valid ID"))
}

/// The balancer over `n` ready backends of `slots` model slots each:
/// [`BackendMeta::MAX_MODEL_SLOTS`] for `model_balancer/N` (they hold the
/// fleet workload), the default for `model_balancer_cold/N`.
pub fn model_balancer(n: usize, slots: usize) -> ModelBalancer<Ready> {
    let backends: Vec<_> = ids(n)
        .map(|id| {
            let meta = BackendMeta::new(id)
                .with_model_slots(slots)
                .expect("slots within 1 ..= 16");
            Backend::with_meta(meta, Ready)
        })
        .collect();
    let _runtime = ready::idle_runtime().enter();
    ModelBalancer::new(ServiceList::new(backends), BalanceConfig::default())
        .expect("inside a runtime")
}

/// The share of a balancer's inference picks that went to an owner with
/// the model resident; `None` before any pick.
pub fn warm_share(stats: BalanceStats) -> Option<f64> {
    let picks = stats.resident_owner + stats.cold_owner + stats.spill + stats.panic;
    (picks > 0).then(|| stats.resident_owner as f64 / picks as f64)
}

/// `tower_p2c/N`: tower's P2C over PeakEwma, as the fleet example builds it.
pub fn tower_p2c(n: usize) -> P2c {
    Balance::new(PeakEwmaDiscover::new(
        ServiceList::new(vec![Ready; n]),
        Duration::from_millis(30),
        Duration::from_secs(10),
        CompleteOnResponse::default(),
    ))
}

/// `tower_p2c_buffer/N`: the same behind a `Buffer`, whose worker runs on `rt`.
pub fn tower_p2c_buffer(rt: &Runtime, n: usize) -> P2cBuffer {
    let _runtime = rt.enter();
    Buffer::new(tower_p2c(n), 4096)
}
