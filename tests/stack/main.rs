//! The crate as a user composes it: a first call, the builder, endpoints,
//! a service that is not HTTP (and one routed from a borrowed `&str`), a
//! call made before readiness through the pass-throughs, reqwest and tonic
//! clients, tracing, and the figures through the metrics facade.

mod adoption;
mod builder;
mod endpoints;
mod metrics;
mod metrics_stream;
mod non_http;
mod not_ready;
mod reqwest_client;
mod routable;
mod tonic_client;
mod tracing;

// This binary's own support, shared by the modules above.
#[allow(dead_code)]
#[path = "../../examples/tonic_client/client.rs"]
mod client;
#[allow(dead_code)]
#[path = "../../examples/tonic_client/errors.rs"]
mod errors;
#[allow(dead_code)]
#[path = "../../examples/tonic_client/kserve.rs"]
mod kserve;
#[allow(dead_code)]
#[path = "../../examples/tonic_client/server.rs"]
mod server;
mod slow_first;

// The workspace's shared test harness (`crates/test-support`), named
// here so that the modules above name its modules by `crate::`.
use tower_model_balance_test_support::nodes;
