//! An inference gateway on `tower-model-balance`, and the etcd
//! registration sidecar that feeds it backends: the library behind the
//! `gateway` and `etcd-register` binaries (`cargo install --path
//! crates/gateway`), and what the tests drive in-process.
//!
//! * [`app`]: the gateway — an axum router whose OpenAI-compatible and
//!   KServe v2 routes go through the middleware's stack (the model ID from
//!   the body or the path, the model-aware balancer with its breakers,
//!   health probes and placement, the hedge) to the backends, and
//!   `GET /metrics` in Prometheus text. [`app::Gateway::new`] builds it
//!   from an [`app::Config`]; [`app::serve`] serves it.
//! * [`args`]: the `gateway` binary's flags.
//! * [`bare`]: the bare proxy (the `bare-proxy` binary) — round robin with
//!   the gateway's runtime, accept loop and client and no layers: the
//!   floor the peer comparison measures the gateway's hop against.
//! * [`register`]: the sidecar — one backend's record in etcd under a
//!   lease, its resident models followed, the lease revoked at the end.
//! * [`cli`]: what the two command lines share.
//!
//! The gateway's own docs: `docs/gateway-example.md` and `docs/etcd.md`
//! in the repository.

#![forbid(unsafe_code)]
#![warn(rust_2018_idioms, missing_debug_implementations)]

pub mod app;
pub mod args;
pub mod bare;
pub mod cli;
pub mod register;
