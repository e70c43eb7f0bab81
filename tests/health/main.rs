//! Health: scores on a paused clock and over loopback, the probes of
//! each server API, and stream errors counted against a backend.

mod loopback;
mod probe;
mod probes;
mod scores;
mod stream;

// This binary's own support, shared by the modules above.
mod health_fleet;

// The workspace's shared test harness (`crates/test-support`), named
// here so that the modules above name its modules by `crate::`.
use tower_model_balance_test_support::{lcg, nodes, sim_balancer};
