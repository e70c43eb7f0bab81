//! The circuit breaker: the layer over mock services on a paused clock,
//! backpressure, classification, the handle and the lock-free record path,
//! a call made before readiness, and races between permits on many
//! threads.

mod backpressure;
mod classify;
mod handle;
mod layer;
mod not_ready;
mod race;

// This binary's own support, shared by the modules above.
mod breaker;
