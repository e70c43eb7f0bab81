//! The atomics and locks of the state that `tests/loom.rs` model-checks:
//! [loom](https://docs.rs/loom)'s under `RUSTFLAGS="--cfg loom"`, so that
//! loom explores the interleavings of the real code, and std's otherwise
//! (the same types, at no cost).
//!
//! Used by the breaker's shared state (`breaker/shared.rs`: published
//! state, probe permits, waiters) and the balancer's request counters
//! (`balance/traffic.rs`: per-backend and fleet in-flight counts).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};
