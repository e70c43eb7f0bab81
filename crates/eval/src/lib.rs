//! The crate's evaluation, as a crate of its own: three binaries over the
//! shared modules of this library.
//!
//! * `fleet` (`src/bin/fleet/`, the main job: `cargo run --release --bin
//!   fleet`) — the balancing strategies side by side over simulated model
//!   servers on loopback, real HTTP (`docs/fleet.md` here);
//! * `simulate` (`src/bin/simulate/`) — a deterministic simulation of a
//!   fleet of 1,000 backends in virtual time, on the crate's own selection
//!   code (`docs/simulation.md`);
//! * `peer` (`src/bin/peer/`, `scripts/peer-compare`) — the gateway beside
//!   vLLM Router in front of the same simulated servers
//!   (`docs/peer-comparison.md`).
//!
//! They live here, not in `tower-model-balance`'s own `examples/`: cargo
//! builds every dev-dependency of a package for any of its examples, and
//! the crate's (tonic, axum, criterion, proptest, the gateway …) are for
//! its tests and benches, not for these. The root workspace lists this
//! crate in `default-members`, so the commands run from the repository's
//! root. From there cargo unifies the features of both default members, so
//! `tower-model-balance` itself is built with the root's dev-dependency
//! on it (`full`: hickory, reqwest, toml, metrics too); `-p
//! tower-model-balance-eval` builds it with just the features its
//! manifest names.
//!
//! The library is what `fleet` and `peer` both send: the seeded workloads
//! ([`workload`], and [`prefix_workload`] for prompts that share long
//! prefixes); and the value parsers of the three binaries' command lines
//! ([`flags`], under their clap derives).

#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]
#![forbid(unsafe_code)]

pub mod flags;
pub mod prefix_workload;
pub mod workload;
