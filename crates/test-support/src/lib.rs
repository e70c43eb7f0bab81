//! The harness shared by the workspace's tests, benches and fuzz targets
//! (the role `tower-test` plays for tower): each module one piece of it,
//! used by more than one test binary. A test's own helpers live beside it
//! (`tests/<module>/`); this crate holds what several of them share, so
//! that nothing is copied and no file is included by `#[path]`.
//!
//! The fuzz invariants (`fuzz_*`) build on the route and config features
//! alone; everything else is behind the default feature `full`.

// The route and config invariants: the fuzz targets' and their proptest
// cases' (`tests/config/fuzz_inputs.rs`).
pub mod fuzz_body;
pub mod fuzz_config;
pub mod fuzz_layer;
pub mod fuzz_route;

// Counting allocators, for the allocation and memory tests.
#[cfg(feature = "full")]
pub mod counting_alloc;
#[cfg(feature = "full")]
pub mod live_heap;

// Mock backends, in memory, and a deterministic RNG.
#[cfg(feature = "full")]
pub mod held;
#[cfg(feature = "full")]
pub mod lcg;
#[cfg(feature = "full")]
pub mod nodes;
#[cfg(feature = "full")]
pub mod ready;
#[cfg(feature = "full")]
pub mod until;

// The simulated model servers (`crates/sim`) on loopback.
#[cfg(feature = "full")]
pub mod sim_balancer;
#[cfg(feature = "full")]
pub mod sim_explicit;
#[cfg(feature = "full")]
pub mod sim_http;

// Real processes on 127.0.0.1: etcd (over TLS with users and roles),
// MLServer and KServe's model server, the gateway in front of them.
#[cfg(feature = "full")]
pub mod etcd;
#[cfg(feature = "full")]
pub mod etcd_secure;
#[cfg(feature = "full")]
pub mod mlserver;
#[cfg(feature = "full")]
pub mod mlserver_http;
#[cfg(feature = "full")]
pub mod ports;
#[cfg(feature = "full")]
pub mod real_gateway;
#[cfg(feature = "full")]
pub mod real_load;
#[cfg(feature = "full")]
pub mod tls_certs;
