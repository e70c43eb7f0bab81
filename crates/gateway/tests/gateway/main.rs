//! The gateway over simulated fleets: its HTTP surface, etcd membership
//! (over TLS with a user, and its allow-list), `https://` backends (sent
//! to, probed, loaded on), TTFT histograms, the OpenAI API, the owners
//! flag, a config file, prefix affinity, readiness, requests sent once and
//! streams, a backend that hangs, the connections the gateway closes
//! itself; the bare proxy. The gateway's app, flags and sidecar are the
//! library's (`tower_model_balance_gateway`), the code the binaries run.

mod access_log;
mod bare;
mod config_file;
mod connections;
mod drain;
mod etcd_trust;
mod histograms;
mod limits;
mod metadata;
mod openai;
mod owners;
mod placement;
mod prefix;
mod readiness;
mod send_once;
mod service;
mod stream;
mod timeouts;
mod tls;
mod tls_probes;
mod unresponsive;
mod with_etcd;

// Support shared by the modules above (the support files name one
// another by `crate::`).
#[allow(dead_code)]
mod binary;
#[path = "../../../../tests/support/etcd.rs"]
mod etcd;
#[path = "../../../../tests/support/etcd_secure.rs"]
mod etcd_secure;
#[allow(dead_code)]
mod gateway;
#[allow(dead_code)]
mod ports;
#[path = "../../../../tests/support/tls_certs.rs"]
mod tls_certs;

use tower_model_balance_gateway::app;
use tower_model_balance_gateway::register::{args, sidecar};
