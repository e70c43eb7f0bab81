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

// Support shared by the modules above, each file once (the support
// files name one another by `crate::`).
#[path = "../support/etcd.rs"]
mod etcd;
#[path = "../support/etcd_fleet.rs"]
mod etcd_fleet;
#[path = "../support/etcd_replica.rs"]
mod etcd_replica;
#[path = "../support/etcd_run.rs"]
mod etcd_run;
#[path = "../support/etcd_secure.rs"]
mod etcd_secure;
#[path = "../support/etcd_source.rs"]
mod etcd_source;
#[path = "../support/etcd_truth.rs"]
mod etcd_truth;
#[allow(dead_code)]
#[path = "../support/held.rs"]
mod held;
#[allow(dead_code)]
#[path = "../support/lcg.rs"]
mod lcg;
#[allow(dead_code)]
#[path = "../support/ports.rs"]
mod ports;
#[allow(dead_code)]
#[path = "../support/ready.rs"]
mod ready;
#[allow(dead_code)]
#[path = "../support/sim_explicit.rs"]
mod sim_explicit;
#[allow(dead_code)]
#[path = "../support/sim_http.rs"]
mod sim_http;
#[path = "../support/tcp_cut.rs"]
mod tcp_cut;
#[path = "../support/tls_certs.rs"]
mod tls_certs;
#[allow(dead_code)]
#[path = "../support/until.rs"]
mod until;
