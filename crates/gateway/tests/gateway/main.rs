//! The gateway over simulated fleets: its HTTP surface, etcd membership
//! (over TLS with a user, and its allow-list), `https://` backends (sent
//! to, probed, loaded on), TTFT histograms, the OpenAI API, the owners
//! flag, a config file, prefix affinity and the prompt tokenizer of precise
//! prefix routing, readiness, requests sent once and
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
mod kv;
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

// This binary's own support, shared by the modules above.
mod binary;
mod gateway;

// The workspace's shared test harness (`crates/test-support`), named
// here so that the modules above name its modules by `crate::`.
use tower_model_balance_test_support::{etcd, etcd_secure, tls_certs};

use tower_model_balance_gateway::app;
use tower_model_balance_gateway::register::{args, sidecar};
