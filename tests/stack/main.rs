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

// Support shared by the modules above, each file once (the support
// files name one another by `crate::`).
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
#[path = "../support/nodes.rs"]
mod nodes;
#[allow(dead_code)]
#[path = "../../examples/tonic_client/server.rs"]
mod server;
#[allow(dead_code)]
#[path = "../support/slow_first.rs"]
mod slow_first;
