//! Discovery: DNS, etcd (watch, registration, replicas that agree, TLS
//! and auth), the static and watch sources, the balancer's reaction to
//! membership, and the etcd tests' own tools.

mod discovery;
mod dns;
mod etcd_agreement;
mod etcd_registration;
mod etcd_tls;
mod etcd_tools;
mod etcd_watch;
mod sources;

// This binary's own support, shared by the modules above.
mod etcd_fleet;
mod etcd_replica;
mod etcd_run;
mod etcd_source;
mod etcd_truth;
mod tcp_cut;

// The workspace's shared test harness (`crates/test-support`), named
// here so that the modules above name its modules by `crate::`.
use tower_model_balance_test_support::{
    etcd, etcd_secure, held, lcg, ready, sim_explicit, sim_http, tls_certs, until,
};
