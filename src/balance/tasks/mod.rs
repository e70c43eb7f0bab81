//! What runs in the background: every task the balancer starts, and the
//! one place that starts them ([`spawn`]).
//!
//! | Task | Started by | Runs | Stops |
//! |---|---|---|---|
//! | [discovery] | [`ModelBalancer::new`](crate::balance::ModelBalancer::new), unless the source was drained at once | applies each batch of [`Change`](tower::discover::Change)s and publishes a snapshot; steps staged ring changes | the source ends, or the balancer is gone |
//! | [health] | [`ModelBalancer::new`](crate::balance::ModelBalancer::new), inside a runtime | scores every backend each health interval, ejects and readmits | the balancer is gone |
//! | [assign] | [`ModelBalancer::new`](crate::balance::ModelBalancer::new), inside a runtime | plans the owners of the models in demand every 250 ms | the balancer is gone |
//! | [probes] | [`BalancerHandle::spawn_probes`](crate::balance::BalancerHandle::spawn_probes) | probes each backend's API once a round | its [`BackgroundTask`](crate::task::BackgroundTask) is dropped, or the balancer is gone |
//! | [repository refresh](placement::refresh) | [`BalancerHandle::enable_placement`](crate::balance::BalancerHandle::enable_placement) | re-reads each backend's model repository | its [`BackgroundTask`](crate::task::BackgroundTask) is dropped, or the balancer is gone |
//! | [model load](placement) | a request for a model that is not resident, with placement enabled | one load per (backend, model), shared by the requests that wait for it | the load ends (its timeout bounds it) |
//!
//! "The balancer is gone": every clone and handle dropped, which closes
//! the `gone` channel every task waits on ([`sleep_or_gone`](start::sleep_or_gone)).

pub(crate) mod assign;
pub(crate) mod discovery;
pub(crate) mod health;
pub(crate) mod placement;
pub(crate) mod probes;
mod start;

pub(crate) use self::start::{spawn, spawn_held};
