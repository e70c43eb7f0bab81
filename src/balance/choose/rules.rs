//! The knobs of a pick ([`Rules`]), read from the config and whether
//! placement is on.

use std::sync::Arc;

use crate::balance::config::fields::BalanceConfig;
use crate::balance::state::placement::Placement;
use crate::placement::WhenCold;

/// The knobs of a pick.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    /// Bounded-load factor `c`.
    pub(crate) load_factor: f64,
    /// Panic mode when fewer than this share of backends are eligible.
    pub(crate) panic_threshold: f64,
    /// Placement on: a cold copy costs a load call, so a request waits on
    /// its owner's load rather than spill to another cold backend.
    pub(crate) placement: bool,
    /// Placement's [`WhenCold::PreferWarm`](crate::placement::WhenCold):
    /// with no owner serving the model under the cap, a backend past the
    /// owners that serves it comes before an owner that must load it.
    pub(crate) prefer_warm: bool,
}

impl Rules {
    /// The rules `config` gives, with `placement` on or off.
    pub(crate) fn of(config: &BalanceConfig, placement: Option<&Arc<Placement>>) -> Self {
        Self {
            load_factor: config.load_factor,
            panic_threshold: config.panic_threshold,
            placement: placement.is_some(),
            prefer_warm: placement.is_some_and(|p| p.policy().when_cold() == WhenCold::PreferWarm),
        }
    }
}
