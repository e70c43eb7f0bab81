//! The fleet example and the peer comparison, as a crate of their own.
//!
//! `cargo run --release --example fleet` (the main job, `examples/fleet/`
//! here) and `scripts/peer-compare` (`examples/peer/`) live here, not in
//! `tower-model-balance`'s own `examples/`: cargo builds every
//! dev-dependency of a package for any of its examples, and the crate's
//! (tonic, axum, criterion, proptest, the gateway …) are for its tests and
//! benches, not for these two. The root workspace lists this crate in
//! `default-members`, so the commands run from the repository's root.
//! From there cargo unifies the features of both default members, so
//! `tower-model-balance` itself is built with the root's dev-dependency
//! on it (`full`: hickory, reqwest, toml, metrics too); `-p
//! tower-model-balance-fleet` builds it with just the features its
//! manifest names.
//!
//! The library is what both examples send: the seeded workloads
//! ([`workload`], and [`prefix_workload`] for prompts that share long
//! prefixes).

#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]
#![forbid(unsafe_code)]

pub mod prefix_workload;
pub mod workload;
