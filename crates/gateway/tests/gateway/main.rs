//! The gateway over simulated fleets: its HTTP surface, etcd membership,
//! TTFT histograms, the OpenAI API, the owners flag, a config file, prefix affinity,
//! readiness, requests sent once and streams; the bare proxy. The gateway's app, flags and sidecar are the library's
//! (`tower_model_balance_gateway`), the code the binaries run.

mod access_log;
mod bare;
mod config_file;
mod drain;
mod histograms;
mod limits;
mod metadata;
mod openai;
mod owners;
mod prefix;
mod readiness;
mod send_once;
mod service;
mod stream;
mod timeouts;
mod with_etcd;

// Support shared by the modules above (the support files name one
// another by `crate::`).
#[allow(dead_code)]
mod binary;
mod etcd;
#[allow(dead_code)]
mod gateway;
#[allow(dead_code)]
mod ports;

use tower_model_balance_gateway::app;
use tower_model_balance_gateway::register::{args, sidecar};
