//! Health: scores on a paused clock and over loopback, the probes of
//! each server API, and stream errors counted against a backend.

mod loopback;
mod probe;
mod probes;
mod scores;
mod stream;

// Support shared by the modules above, each file once (the support
// files name one another by `crate::`).
#[allow(dead_code)]
#[path = "../support/health_fleet.rs"]
mod health_fleet;
#[allow(dead_code)]
#[path = "../support/lcg.rs"]
mod lcg;
#[allow(dead_code)]
#[path = "../support/nodes.rs"]
mod nodes;
#[allow(dead_code)]
#[path = "../support/sim_balancer.rs"]
mod sim_balancer;
