//! The etcd registration sidecar (`src/bin/etcd-register.rs`): its flags
//! and its work, which `tests/gateway/with_etcd.rs` runs in-process too.

pub mod args;
pub mod sidecar;
