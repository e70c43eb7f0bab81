//! The example gateway over simulated fleets: its HTTP surface, etcd
//! membership, TTFT histograms, the OpenAI API, prefix affinity and
//! streams.

mod histograms;
mod openai;
mod prefix;
mod service;
mod stream;
mod with_etcd;

// Support shared by the modules above, each file once (the support
// files name one another by `crate::`).
#[allow(dead_code)]
#[path = "../../examples/gateway/app.rs"]
mod app;
#[allow(dead_code)]
#[path = "../../examples/etcd_register/args.rs"]
mod args;
#[path = "../support/etcd.rs"]
mod etcd;
#[allow(dead_code)]
#[path = "../support/gateway.rs"]
mod gateway;
#[allow(dead_code)]
#[path = "../../examples/gateway/args.rs"]
mod gateway_args;
#[allow(dead_code)]
#[path = "../support/ports.rs"]
mod ports;
#[allow(dead_code)]
#[path = "../../examples/etcd_register/sidecar.rs"]
mod sidecar;
