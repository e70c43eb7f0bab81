//! Why a request was routed nowhere ([`Refused`]): a pick's
//! [`Miss`] mapped to the error its caller sees, beside those errors
//! (`error.rs`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::backend::Exclude;
use crate::balance::choose::ask::Ask;
use crate::balance::choose::ctx::Miss;
use crate::balance::error::{NoAlternative, NoHealthyBackend, Overloaded};
use crate::balance::state::fleet::Fleet;
use crate::balance::state::shared::Counters;
use crate::error::BoxError;
use crate::route::RouteView;

/// Why [`Local::route`](crate::balance::choose::decide::Local::route)
/// routed nothing.
#[derive(Debug)]
pub(crate) enum Refused {
    NoBackend(NoHealthyBackend),
    /// Only a request carrying a non-strict
    /// [`Exclude`](crate::backend::Exclude) (a hedge's backup) is refused so.
    NoAlternative(NoAlternative),
    /// Under admission: every backend the request could go to is at its
    /// limit. The caller queues it, or sheds it with this error.
    Saturated(Overloaded),
}

impl From<Refused> for BoxError {
    fn from(refused: Refused) -> Self {
        match refused {
            Refused::NoBackend(e) => e.into(),
            Refused::NoAlternative(e) => e.into(),
            Refused::Saturated(e) => e.into(),
        }
    }
}

impl Refused {
    /// Saturation: the error a request shed at once fails with, its
    /// `Retry-After` the admission settings' ([`Fleet::admission`]).
    #[cold]
    pub(crate) fn saturated(fleet: &Fleet, route: &RouteView<'_>) -> Self {
        let retry_after = fleet.admission().map(|a| a.retry_after);
        Self::Saturated(Overloaded::new(
            route.model_id(),
            route.urgency,
            Duration::ZERO,
            retry_after.unwrap_or_default(),
        ))
    }

    /// The error of the pick API
    /// ([`ModelBalancer::pick`](crate::balance::ModelBalancer::pick)),
    /// which never queues: saturation sheds at once (counted in `stats`).
    /// A `RouteInfo` carries no exclusion: only `NoBackend` is reached of
    /// the other two.
    #[cold]
    pub(crate) fn for_pick(self, stats: &Counters) -> BoxError {
        match self {
            Self::NoBackend(e) => e.into(),
            Self::NoAlternative(e) => NoHealthyBackend::new(e.model).into(),
            Self::Saturated(shed) => {
                stats.shed(shed.urgency);
                shed.into()
            }
        }
    }

    /// The refusal of `route`, asked as `ask`, whose pick missed so: a
    /// request for which no backend is healthy counts in `stats`.
    #[cold]
    pub(crate) fn of(
        miss: Miss,
        stats: &Counters,
        fleet: &Fleet,
        route: &RouteView<'_>,
        ask: &Ask,
    ) -> Self {
        match miss {
            Miss::NoBackend => {
                stats.no_backend.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    model = route.model,
                    owners = ask.owners,
                    unseen = ask.unseen,
                    "no healthy backend"
                );
                Self::NoBackend(NoHealthyBackend::new(route.model_id()))
            }
            Miss::Saturated => {
                tracing::debug!(model = route.model, owners = ask.owners, "saturated");
                Self::saturated(fleet, route)
            }
            Miss::NoAlternative => {
                // Only reached with an exclusion (the ask's comes from it).
                let excluded = Exclude::of(route).map(|x| x.backend().clone());
                tracing::debug!(
                    model = route.model,
                    ?excluded,
                    "backup refused: no alternative"
                );
                match excluded {
                    Some(x) => Self::NoAlternative(NoAlternative::new(route.model_id(), x)),
                    None => Self::NoBackend(NoHealthyBackend::new(route.model_id())),
                }
            }
        }
    }
}
